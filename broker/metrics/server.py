"""The metrics endpoint: an HTTP server on its own threads, serving one registry.

`broker run --metrics-port` serves the state's metrics and the controller's pass
duration while it runs; `broker metrics serve` the state's alone. The registry is made
per server (no process-wide one), and the port is bound before anything else starts,
so a port in use is one line at start-up, not a controller half running.
"""

from __future__ import annotations

import errno
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.metrics.exposition import ControllerMetrics, ReadsOpener, StateCollector

if TYPE_CHECKING:
    from threading import Thread
    from wsgiref.simple_server import WSGIServer

    from broker.state.location import DatabaseUrl, StateLocation
    from broker.state.pg_pool import StorePool
    from broker.state.reads import StateReads

DEFAULT_PORT = 9464  # the port Prometheus' exporter list gives the OpenTelemetry exporter
DEFAULT_HOST = "127.0.0.1"  # team names and spend: opened wider only when asked (--host)


class PortError(ValueError):
    """The metrics port cannot be served (out of range, in use, not allowed)."""


@dataclass
class MetricsServer:
    """A running endpoint; `controller` records the pass durations (None: state only)."""

    server: WSGIServer
    thread: Thread
    controller: ControllerMetrics | None
    url: str
    reads: StateOpener | None = None  # closed with the server (its connection pool)

    def close(self) -> None:
        """Stop serving and free the port (safe to repeat)."""
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)
        if self.reads is not None:
            self.reads.close()


def check_port(port: int) -> None:
    """A port a user may ask for (0, "any free port", only the tests ask for)."""
    if not 1 <= port <= 65535:
        raise PortError(f"metrics port must be 1..65535, not {port}")


def serve_metrics(
    port: int,
    host: str,
    open_reads: ReadsOpener,
    pool_gpus: Mapping[str, float],
    *,
    controller: bool = False,
) -> MetricsServer:
    """Serve the state's metrics (and, with `controller`, the pass duration) on
    http://host:port/metrics until `close`. Raises PortError for a port that cannot
    be bound (0: any free port; `url` says which)."""
    from prometheus_client import CollectorRegistry, start_http_server
    from prometheus_client.process_collector import ProcessCollector

    if not 0 <= port <= 65535:
        raise PortError(f"metrics port must be 1..65535, not {port}")
    registry = CollectorRegistry()
    registry.register(StateCollector(open_reads, pool_gpus))
    ProcessCollector(registry=registry)  # process_cpu_seconds_total, ..._resident_memory_bytes
    own = ControllerMetrics(registry) if controller else None
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise PortError(f"metrics port {port} on {host} is in use") from None
        if exc.errno == errno.EACCES:
            raise PortError(f"metrics port {port} on {host} is not allowed here") from None
        raise PortError(f"cannot serve metrics on {host}:{port}: {exc.strerror}") from None
    bound = server.server_address[1]
    reads = open_reads if isinstance(open_reads, StateOpener) else None
    return MetricsServer(server, thread, own, f"http://{host}:{bound}/metrics", reads)


class StateOpener:
    """Opens the state at `path` (a SQLite file or a PostgreSQL database) read-only for
    each scrape: a file afresh each time (its own connection: reads never block a
    writer; None while there is no file yet), a database through a small pool of
    connections the scrape threads share (broker.state.pg_pool), opened at the first
    scrape. `close()` closes the pool."""

    def __init__(self, path: StateLocation) -> None:
        self._path = path
        self._pool: StorePool | None = None
        self._lock = threading.Lock()

    @contextmanager
    def __call__(self) -> Iterator[StateReads | None]:
        from broker.clock import SystemClock
        from broker.state import StateStore
        from broker.state.files import examine
        from broker.state.location import DatabaseUrl

        path = self._path
        if isinstance(path, DatabaseUrl):
            with self._pooled(path).store() as pooled:
                yield pooled
            return
        if examine(path).kind in ("missing", "empty"):
            yield None
            return
        store = StateStore.open(path, SystemClock(), read_only=True)
        try:
            yield store
        finally:
            store.close()

    def _pooled(self, url: DatabaseUrl) -> StorePool:
        from broker.clock import SystemClock
        from broker.state.pg_pool import StorePool

        with self._lock:  # two first scrapes at once open one pool
            if self._pool is None:
                self._pool = StorePool(url, SystemClock(), read_only=True).open()
            return self._pool

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None


def read_only_state(path: StateLocation) -> StateOpener:
    """The scrapes' opener of the state at `path` (`StateOpener`); close it after."""
    return StateOpener(path)
