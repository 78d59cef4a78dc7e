""" "Did you mean" hints for unknown names (GPUs, regions, fields, clouds).

`hint` lists up to three close names (a sentence suffix for a CLI message);
`suggestion` quotes the closest one (for a located error about a field or a value).
"""

from __future__ import annotations

from collections.abc import Iterable


def _edit_distance(a: str, b: str) -> int:
    """Edit distance counting insert, delete, substitute and swap of neighbours as one."""
    rows = [list(range(len(b) + 1))]
    for i in range(1, len(a) + 1):
        row = [i]
        for j in range(1, len(b) + 1):
            cost = min(
                rows[i - 1][j] + 1, row[j - 1] + 1, rows[i - 1][j - 1] + (a[i - 1] != b[j - 1])
            )
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                cost = min(cost, rows[i - 2][j - 2] + 1)
            row.append(cost)
        rows.append(row)
    return rows[-1][-1]


def did_you_mean(name: str, choices: Iterable[str], limit: int = 3) -> list[str]:
    """Closest known names to `name`, case-insensitively, best first.

    Ranked by edit distance, then by length difference (a mistyped letter is
    likelier than a missing one), then alphabetically; names sharing the typed
    prefix count as close too.
    """
    wanted = name.strip().lower()
    by_lower: dict[str, str] = {}
    for choice in choices:
        by_lower.setdefault(choice.lower(), choice)
    budget = max(2, len(wanted) // 3)
    scored = []
    for low, original in by_lower.items():
        distance = _edit_distance(wanted, low)
        if distance <= budget or (len(wanted) >= 2 and low.startswith(wanted)):
            scored.append((distance, abs(len(low) - len(wanted)), low, original))
    return [original for *_, original in sorted(scored)[:limit]]


def hint(name: str, choices: Iterable[str]) -> str:
    """A sentence suffix such as " (did you mean A100, A10?)", or "" when nothing is close."""
    close = did_you_mean(name, choices)
    return f" (did you mean {', '.join(close)}?)" if close else ""


def suggestion(name: object, choices: Iterable[str]) -> str:
    """A suffix such as " (did you mean 'node'?)", or "" when nothing is close."""
    if not isinstance(name, str):
        return ""
    close = did_you_mean(name, choices, limit=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
