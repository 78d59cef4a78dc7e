"""Checkpoints that move with a job: where each place keeps them, the copy before a
resumed attempt starts elsewhere, its egress charge, and the work an interruption lost.

A provider that keeps a checkpoint store per place (`providers.capabilities.
CheckpointStores`: the sandbox, the simulator, on-prem pools) is given here; without
one (clouds), a job reads and writes its manifest's checkpoint URI in place, and
nothing is copied. Stores may be local folders or any URI the provider's ObjectStore
reads (`file://`, `s3://`, `gs://`, `az://`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

# The job contract (docs/spot.md): after each complete checkpoint the job writes, in its
# checkpoint folder, this file holding the time (ISO 8601) its checkpoint was taken.
MARKER = ".broker-checkpoint"
MARKER_MAX_BYTES = 4096

if TYPE_CHECKING:
    from broker.spec import JobSpec
    from broker.state import Attempt, Job, StateStore
    from providers.base import Instance, Provider
    from providers.capabilities import CheckpointStores


def folder_uri(location: str) -> str:
    """A store location as the URI of a folder: an absolute local path as file://, and a
    trailing "/" so that listing `.../j-1/` never matches `.../j-10/`."""
    uri = location if "://" in location else PurePosixPath(location).as_uri()
    return uri if uri.endswith("/") else uri + "/"


@dataclass
class Checkpoints:
    """The checkpoint side of the controller, for one store and one provider."""

    store: StateStore
    provider: Provider
    stores: CheckpointStores | None  # the provider, when it keeps stores per place

    def location(self, job_id: str, cloud: str, region: str) -> str | None:
        """The job's checkpoint store in (cloud, region), as a path or URI; None when
        the provider keeps none per place (clouds read the manifest's URI)."""
        if self.stores is None:
            return None
        return self.stores.checkpoint_store(job_id, cloud, region)

    def kept_per_place(self, job_id: str, cloud: str, region: str) -> bool:
        return self.location(job_id, cloud, region) is not None

    def migrate(self, spec: JobSpec, job: Job, attempt: Attempt) -> None:
        """Before a resumed attempt starts elsewhere, copy the job's checkpoint from the
        store where it was written to the new place's store (streamed by the provider's
        ObjectStore). Done once per attempt: the copy is recorded, so a controller killed
        mid-copy copies again on restart (same bytes) and one that died after it does
        not. Raises ProviderError when the copy fails (retryable or not)."""
        from broker.recovery import checkpoint_place

        if attempt.number == 1 or spec.checkpoint is None or self.store.migration(attempt.id):
            return
        source, here = checkpoint_place(self.store, job), attempt.placed_on
        if source is None or (source.cloud, source.region) == (here.cloud, here.region):
            return
        src = self.location(job.id, source.cloud, source.region)
        dst = self.location(job.id, here.cloud, here.region)
        if src is None or dst is None:
            return  # the clouds read the durable URI in place
        objects = self.provider.object_store()
        if not objects.list(folder_uri(src)):
            return  # nothing written yet
        copied = objects.copy_tree(folder_uri(src), folder_uri(dst))
        self.store.record_migration(
            attempt.id,
            f"{source.cloud}/{source.region}",
            f"{here.cloud}/{here.region}",
            sum(item.size for item in copied),
        )

    def migration_charge(self, attempt: Attempt, spec: JobSpec) -> list[dict[str, Any]]:
        """The egress entry of the checkpoint copy into this attempt, priced at the
        manifest's checkpoint size (what the plan priced), billed by the sending cloud."""
        from broker.state.charges import egress_entry
        from broker.state.model import to_decimal
        from pricing.regions import Place

        moved = self.store.migration(attempt.id)
        if moved is None or spec.checkpoint is None or not spec.checkpoint.size_gb:
            return []
        cloud, _, region = moved["from"].partition("/")
        here = attempt.placed_on
        entry = egress_entry(
            Place(cloud, region),
            (here.cloud, here.region),
            to_decimal(spec.checkpoint.size_gb),
            f"checkpoint migration {spec.checkpoint.uri}",
            {},
        )
        return [entry] if entry is not None else []

    def lost_work(
        self, job: Job, attempt: Attempt, instance: Instance, hours: Decimal, told: datetime | None
    ) -> Lost | None:
        """The work an interrupted attempt lost (docs/spot.md, "Lost work"): its billed
        time after its last checkpoint, none when it checkpointed once told to stop
        (`told`: the notice, or the broker's own SIGTERM). The checkpoint is recorded.
        None when the instance's times are not known."""
        from broker.reports.lines import share_lost
        from broker.state.money import hours_figure

        start, end = instance.launched_at, instance.ended_at
        if start is None or end is None or end <= start:
            return None
        saved = self.saved_at(job, attempt, start, end)
        if saved is not None:
            self.store.record_checkpoint(attempt.id, saved)
        share = share_lost(start, end, saved, told)
        return Lost(share, hours_figure(Decimal(hours) * share), saved)

    def saved_at(self, job: Job, attempt: Attempt, start: datetime, end: datetime):
        """When the attempt last checkpointed: the time the job wrote in its marker
        (`MARKER` in its checkpoint store), else what the provider can tell (e.g. file
        times); None when it did not checkpoint during [start, end]."""
        here = attempt.placed_on
        at = self._marker(job.id, here.cloud, here.region)
        if at is None and self.stores is not None:
            at = self.stores.last_checkpoint_at(job.id, here.cloud, here.region)
        if at is None or at <= start:
            return None  # none, or an earlier attempt's in the same store
        return min(at, end)

    def _marker(self, job_id: str, cloud: str, region: str) -> datetime | None:
        """The time in the job's `MARKER` file, read through the provider's ObjectStore
        from the place's store; None when there is none (or it cannot be read)."""
        import tempfile

        from providers.errors import ProviderError

        location = self.location(job_id, cloud, region)
        if location is None:
            return None  # the clouds: the marker is in the job's own URI, not read here
        if "://" not in location and not os.path.lexists(PurePosixPath(location) / MARKER):
            return None  # a local folder without one: seen without the ObjectStore's error
        uri = folder_uri(location) + MARKER
        objects = self.provider.object_store()
        try:
            if objects.size(uri) > MARKER_MAX_BYTES:
                return None
            with tempfile.TemporaryDirectory(prefix="broker-marker-") as tmp:
                copy = Path(tmp) / MARKER
                objects.get(uri, copy)
                text = copy.read_text(encoding="utf-8", errors="replace")
        except (ProviderError, OSError):
            return None
        return parse_marker(text)


@dataclass(frozen=True, slots=True)
class Lost:
    """What an interruption threw away: a share of the attempt's billed time."""

    share: Decimal  # 0..1
    hours: Decimal  # billed hours x share, at the ledger's 6 places
    saved_at: datetime | None  # the last checkpoint it counts from (None: the start)

    @property
    def text(self) -> str:
        """What `broker status` says of it, after the attempt's reason."""
        if self.share == 0:
            return "; no work lost: it checkpointed when told to stop"
        return f"; lost {self.hours:.2f} h of work since the last checkpoint"


def parse_marker(text: str) -> datetime | None:
    """The time on the marker's first line (ISO 8601; without an offset: UTC)."""
    from datetime import UTC

    first = text.strip().splitlines()[0].strip() if text.strip() else ""
    try:
        moment = datetime.fromisoformat(first.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
