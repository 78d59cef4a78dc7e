"""Submitting manifests to the state store: every document of every file, or nothing.

Validation happens before the store is opened, so a broken manifest changes no
state. Each job is stored with the exact text of its own YAML document (a file
may hold several), which is what the controller reads back.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.manifest.load import Manifest
    from broker.state import StateStore, SubmitResult


def document_texts(path: Path) -> list[str]:
    """The text of each YAML document of a file, as written (comments included)."""
    import yaml

    text = path.read_text(encoding="utf-8")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    pieces = []
    for node in yaml.compose_all(text, Loader=loader):  # one per document, as the loader counts
        pieces.append(
            "" if node is None else text[node.start_mark.index : node.end_mark.index].strip() + "\n"
        )
    return pieces


def submit_manifests(store: StateStore, manifests: list[Manifest]) -> list[SubmitResult]:
    """Enqueue each manifest (a no-op for an unchanged one); results in the same order.
    The stored spec JSON is the spec cache's encoding (broker.manifest.spec_cache)."""
    from broker.manifest.spec_cache import encode

    texts: dict[Path, list[str]] = {}
    results = []
    for manifest in manifests:
        if manifest.path not in texts:
            texts[manifest.path] = document_texts(manifest.path)
        spec = manifest.spec
        text = texts[manifest.path][manifest.index]
        results.append(
            store.submit(
                encode(spec),
                text,
                manifest.digest,
                spec.team,
                spec.name,
                spec.queue,
                spec.priority,
            )
        )
    return results
