"""The specs a controller plans, decoded once and kept for as long as it runs.

A pass plans every queued job; reading and decoding each job's spec alone costs a query
and a decode per job. The specs the pass needs are read in one query instead
(`StateStore.encoded_specs`), and each distinct spec is decoded once: jobs written from
one template differ only in name and team, so they share a `spec_key`
(broker.spec_codec), whose one decoded spec each of them takes with its own name and
team. Each distinct part of a spec (requirements, run, runtime, ...) is decoded once
too, so specs of different keys share their equal parts' objects, which is also what
lets the planner see at a glance which jobs ask the same (broker.planner.sharing).
A job version's spec never changes, so what is kept stays true.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from broker.spec import JobSpec
from broker.spec_codec import PARTS, assemble, decode_part

if TYPE_CHECKING:
    from datetime import datetime

    from broker.state import Job, JobState, StateStore
    from broker.state.reads import EncodedSpec


_UNKNOWN = object()  # a part not decoded yet (a decoded part may be None: no checkpoint)


class Specs:
    """Job specs by (job id, version), read in bulk and kept."""

    def __init__(self) -> None:
        self._specs: dict[tuple[str, int], JobSpec] = {}
        # spec key -> the fields of a spec of that key, decoded (a JobSpec's keywords:
        # JobSpec(**fields) is 2.5 µs a job, dataclasses.replace 6.5 µs)
        self._keyed: dict[str, dict[str, Any]] = {}
        self._parts: dict[tuple[str, str], Any] = {}  # (part, its JSON) -> decoded
        self._submitted: dict[tuple[str, int], datetime] = {}  # when each was submitted

    def get(self, store: StateStore, job: Job) -> JobSpec:
        """The job's spec in the version in force (read alone when not loaded)."""
        key = (job.id, job.version)
        spec = self._specs.get(key)
        if spec is None:
            spec = self._specs[key] = store.version(job.id, job.version).spec
        return spec

    def submitted_at(self, store: StateStore, job_id: str, version: int) -> datetime:
        """When the job's `version` was submitted (read alone when not loaded)."""
        at = self._submitted.get((job_id, version))
        if at is None:
            at = self._submitted[job_id, version] = store.version(job_id, version).submitted_at
        return at

    def load(self, store: StateStore, jobs: Iterable[Job], states: Iterable[JobState]) -> None:
        """Read, in one query, the specs of the jobs in `states` when one of `jobs` is
        not known yet (those are in `states`)."""
        if all((job.id, job.version) in self._specs for job in jobs):
            return
        rows = [r for r in store.encoded_specs(states) if (r.job_id, r.version) not in self._specs]
        unread = {}  # a version to read for each key not decoded yet, and each without one
        for row in rows:
            if row.key is None or row.key not in self._keyed:
                unread.setdefault(row.key or (row.job_id, row.version), (row.job_id, row.version))
        texts = store.spec_texts(unread.values()) if unread else {}
        for row in rows:
            self._specs[row.job_id, row.version] = self._spec_of(row, texts)
            self._submitted[row.job_id, row.version] = row.submitted_at

    def _spec_of(self, row: EncodedSpec, texts: dict[tuple[str, int], str]) -> JobSpec:
        """The spec of `row`: its key's, with the job's own name and team."""
        if row.key is None:  # written before spec keys (schema version 6): decoded whole
            return self.decode(json.loads(texts[row.job_id, row.version]))
        fields_of = self._keyed.get(row.key)
        if fields_of is None:
            spec = self.decode(json.loads(texts[row.job_id, row.version]))
            fields_of = self._keyed[row.key] = {f.name: getattr(spec, f.name) for f in fields(spec)}
        return JobSpec(**fields_of | {"name": row.name, "team": row.team})

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
