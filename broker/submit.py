"""Submitting manifests to the state store: every document of every file, or nothing.

Validation happens before the store is opened, so a broken manifest changes no
state. Each job is stored with its decoded spec and the exact text of its own
YAML document (a file may hold several), both carried by the loaded `Manifest`.
Before that, `prepare` refuses what cannot run here (an image job the sandbox would
have to run without a container runtime) and packs each workdir (`broker.workdirs`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.manifest.load import Manifest
    from broker.spec import JobSpec
    from broker.state import StateStore, SubmitResult
    from broker.state.location import StateLocation

PLACES = ("aws", "gcp", "azure", "onprem")  # every cloud a job may be placed on


def submit_manifests(store: StateStore, manifests: list[Manifest]) -> list[SubmitResult]:
    """Enqueue each manifest (a no-op for an unchanged one); results in the same order.
    A workdir `prepare` did not pack yet is packed beside the store's file first
    (providers.workdir.WorkdirError, and nothing enqueued, when one cannot be)."""
    if any(m.spec.run.workdir and not m.spec.run.workdir_archive for m in manifests):
        from broker.workdirs import archives_dir, pack_manifests
        from providers.workdir import WorkdirError

        manifests, errors = pack_manifests(manifests, archives_dir(store.path))
        if errors:
            raise WorkdirError("\n".join(errors))
    return [store.submit(m.spec, m.text, m.digest) for m in manifests]


def prepare(
    manifests: list[Manifest], state_path: StateLocation, clouds: Sequence[str]
) -> tuple[list[Manifest], list[str]]:
    """The manifests ready to enqueue on the broker of `state_path`, whose `clouds` are
    launched for real (the sandbox runs the rest), or the errors, one line each."""
    from broker.workdirs import archives_dir, pack_manifests

    errors = [
        f"{m.path}:{m.line}: {reason}"
        for m in manifests
        if (reason := sandbox_refusal(m.spec, clouds)) is not None
    ]
    if errors:
        return manifests, errors
    return pack_manifests(manifests, archives_dir(state_path))


def sandbox_refusal(spec: JobSpec, clouds: Sequence[str]) -> str | None:
    """Why the sandbox could not run `spec` here, if it might be placed there: an image
    job with no container runtime on this machine (it never runs on the host instead)."""
    from providers.jobscript import MACHINE_IMAGE
    from providers.sandbox.jobs import container_runtime, no_runtime_reason

    image = spec.run.image
    if not image or MACHINE_IMAGE.fullmatch(image):
        return None
    req = spec.requirements
    allowed = [c for c in (req.clouds or PLACES) if c not in req.exclude_clouds]
    if all(cloud in clouds for cloud in allowed):
        return None  # every place it may go is a cloud launched for real
    if container_runtime() is not None:
        return None
    return no_runtime_reason(image)
