"""Submitting manifests to the state store: every document of every file, or nothing.

Validation happens before the store is opened, so a broken manifest changes no
state. Each job is stored with its decoded spec and the exact text of its own
YAML document (a file may hold several), both carried by the loaded `Manifest`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.manifest.load import Manifest
    from broker.state import StateStore, SubmitResult


def submit_manifests(store: StateStore, manifests: list[Manifest]) -> list[SubmitResult]:
    """Enqueue each manifest (a no-op for an unchanged one); results in the same order."""
    return [store.submit(m.spec, m.text, m.digest) for m in manifests]
