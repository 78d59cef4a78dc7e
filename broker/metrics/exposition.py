"""The metrics as Prometheus families: the state's, collected at scrape time, and the
controller's own (its pass duration), measured in the process.

`StateCollector` opens the state read-only for each scrape (its own connection, on the
scraping thread: a store is never shared between threads) and turns `StateFigures` into
metric families, so a scrape never takes a write lock and never blocks the controller's
writers. Names follow Prometheus conventions: the `broker_` prefix, `_total` counters,
base units (`_seconds`, `_bytes`), money in USD (`_usd`). docs/metrics.md lists them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from broker.metrics.figures import StateFigures, state_figures

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import Metric

    from broker.state.reads import StateReads

# Opens the state for one scrape, read-only; None: there is no state yet.
ReadsOpener = Callable[[], AbstractContextManager["StateReads | None"]]
PASS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class StateCollector:
    """The state's metrics, counted from the store on every scrape. `pool_gpus`: the
    on-prem pools' GPUs by pool name (what the controller reads from the inventory)."""

    def __init__(self, open_reads: ReadsOpener, pool_gpus: Mapping[str, float]) -> None:
        self._open_reads = open_reads
        self._pool_gpus = dict(pool_gpus)

    def describe(self) -> list[Metric]:
        return []  # registering reads nothing: every family is made at scrape time

    def collect(self) -> Iterator[Metric]:
        with self._open_reads() as reads:
            figures = state_figures(reads) if reads is not None else None
        yield from families(figures, self._pool_gpus)


def families(figures: StateFigures | None, pool_gpus: Mapping[str, float]) -> Iterator[Metric]:
    """The metric families of `figures` (None: no state yet, every family empty)."""
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
    )

    def gauge(name: str, doc: str, labels: list[str], values: Mapping) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, doc, labels=labels)
        for key, value in sorted(values.items()):
            family.add_metric(list(_tuple(key)), float(value))
        return family

    def counter(name: str, doc: str, labels: list[str], values: Mapping) -> CounterMetricFamily:
        family = CounterMetricFamily(name, doc, labels=labels)
        for key, value in sorted(values.items()):
            family.add_metric(list(_tuple(key)), float(value))  # Decimal: float only here
        return family

    f = figures
    yield gauge("broker_jobs", "Jobs (runs) in each state, by team and queue.",
                ["team", "queue", "state"], f.jobs if f else {})  # fmt: skip
    waits = HistogramMetricFamily(
        "broker_queue_wait_seconds",
        "Time each started attempt waited in the queue (from queueing, or its job's "
        "previous attempt's end, to its start).",
        labels=["team", "queue"],
    )
    for (team, queue), hist in sorted((f.queue_wait if f else {}).items()):
        waits.add_metric([team, queue], hist.cumulative(), hist.total)
    yield waits
    yield gauge("broker_running_jobs", "Attempts running now.",
                ["cloud", "pool", "market"], f.running_jobs if f else {})  # fmt: skip
    yield gauge("broker_running_gpus", "GPUs of the attempts running now.",
                ["cloud", "pool", "market"], f.running_gpus if f else {})  # fmt: skip
    yield counter("broker_gpu_hours", "GPU-hours billed by ended attempts.",
                  ["team", "cloud", "market"], f.gpu_hours if f else {})  # fmt: skip
    yield counter("broker_spend_usd", "Money charged (USD), the ledger's exact sum.",
                  ["team", "cloud", "market"], f.spend_usd if f else {})  # fmt: skip
    allocated = f.pool_allocated_gpus if f else {}
    pools = sorted(set(pool_gpus) | set(allocated))
    yield gauge("broker_pool_gpus", "GPUs of each on-prem pool (its inventory).",
                ["pool"], {p: pool_gpus.get(p, 0.0) for p in pools})  # fmt: skip
    yield gauge("broker_pool_allocated_gpus", "GPUs of each pool held by open attempts.",
                ["pool"], {p: allocated.get(p, 0.0) for p in pools})  # fmt: skip
    ratio = {p: allocated.get(p, 0.0) / pool_gpus[p] for p in pools if pool_gpus.get(p)}
    yield gauge("broker_pool_utilization_ratio", "Allocated / total GPUs of each pool.",
                ["pool"], ratio)  # fmt: skip
    yield counter("broker_interruptions", "Attempts interrupted: reclaim (the provider "
                  "took it back) or preemption (the broker stopped it), by place.",
                  ["kind", "cloud", "region", "pool"], f.interruptions if f else {})  # fmt: skip
    recovery = HistogramMetricFamily(
        "broker_recovery_seconds",
        "Recoveries: from an interrupted attempt's end to the next attempt running.",
        labels=[],
    )
    if f is not None:
        recovery.add_metric([], f.recovery.cumulative(), f.recovery.total)
    yield recovery
    yield counter("broker_checkpoint_moved_bytes", "Checkpoint bytes copied between places.",
                  ["from_cloud", "to_cloud"], f.checkpoint_bytes if f else {})  # fmt: skip
    yield counter("broker_launches", "Attempts started (launches asked of a provider).",
                  ["cloud", "market"], f.launches if f else {})  # fmt: skip
    yield counter("broker_launch_failures", "Attempts that failed without running, by "
                  "error class (providers.errors).",
                  ["cloud", "error_class"], f.launch_failures if f else {})  # fmt: skip


def _tuple(key: object) -> tuple[str, ...]:
    return tuple(key) if isinstance(key, tuple) else (str(key),)


class ControllerMetrics:
    """The controller's own figures (in-process, lost at restart as Prometheus expects
    of a process's counters): how long each reconcile pass took."""

    def __init__(self, registry: CollectorRegistry) -> None:
        from prometheus_client import Histogram

        self._passes = Histogram(
            "broker_controller_pass_duration_seconds",
            "Wall time of each reconcile pass of this controller.",
            buckets=PASS_BUCKETS,
            registry=registry,
        )

    def observe_pass(self, seconds: float) -> None:
        self._passes.observe(seconds)
