"""The specs a controller plans, decoded once and kept for as long as it runs.

A pass plans every queued job; reading and decoding each job's spec alone costs a query
and a decode per job. The specs the pass needs are read in one query instead
(`StateStore.encoded_specs`), and each distinct part of them (requirements, run,
runtime, ...) is decoded once: jobs written from one template then share their parts'
objects, which is also what lets the planner see at a glance which jobs ask the same
(broker.planner.sharing). A job version's spec never changes, so what is kept stays
true.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from broker.spec_codec import PARTS, assemble, decode_part

if TYPE_CHECKING:
    from broker.spec import JobSpec
    from broker.state import Job, JobState, StateStore


_UNKNOWN = object()  # a part not decoded yet (a decoded part may be None: no checkpoint)


class Specs:
    """Job specs by (job id, version), read in bulk and kept."""

    def __init__(self) -> None:
        self._specs: dict[tuple[str, int], JobSpec] = {}
        self._parts: dict[tuple[str, str], Any] = {}  # (part, its JSON) -> decoded

    def get(self, store: StateStore, job: Job) -> JobSpec:
        """The job's spec in the version in force (read alone when not loaded)."""
        key = (job.id, job.version)
        spec = self._specs.get(key)
        if spec is None:
            spec = self._specs[key] = store.version(job.id, job.version).spec
        return spec

    def load(self, store: StateStore, jobs: Iterable[Job], states: Iterable[JobState]) -> None:
        """Read, in one query, the specs of the jobs in `states` when one of `jobs` is
        not known yet (those are in `states`)."""
        if all((job.id, job.version) in self._specs for job in jobs):
            return
        for job_id, version, data in store.encoded_specs(states):
            if (job_id, version) not in self._specs:
                self._specs[job_id, version] = self.decode(data)

    def decode(self, data: dict[str, Any]) -> JobSpec:
        """broker.spec_codec.decode, each distinct part decoded once (across calls)."""
        parts = {}
        for name in PARTS:
            text = json.dumps(data[name])
            part = self._parts.get((name, text), _UNKNOWN)
            if part is _UNKNOWN:
                part = self._parts[name, text] = decode_part(name, data[name])
            parts[name] = part
        return assemble(data, parts)
