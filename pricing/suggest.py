""""Did you mean" hints for unknown names (GPUs, regions, fields, clouds)."""

from __future__ import annotations

from collections.abc import Iterable


def did_you_mean(name: str, choices: Iterable[str], limit: int = 3) -> list[str]:
    """Closest known names to `name`, case-insensitively, best first."""
    from difflib import get_close_matches

    by_lower: dict[str, str] = {}
    for choice in choices:
        by_lower.setdefault(choice.lower(), choice)
    matches = get_close_matches(name.lower(), list(by_lower), n=limit, cutoff=0.5)
    prefix = [c for low, c in by_lower.items() if low.startswith(name.lower()) and c not in matches]
    return [by_lower[m] for m in matches] + prefix[: max(0, limit - len(matches))]


def hint(name: str, choices: Iterable[str]) -> str:
    """A sentence suffix such as " (did you mean A100, A10?)", or "" when nothing is close."""
    close = did_you_mean(name, choices)
    return f" (did you mean {', '.join(close)}?)" if close else ""
