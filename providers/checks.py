"""Which clouds are usable from here, checked in parallel with short timeouts.

Each cloud adapter has a `check(timeout)` in `providers/<cloud>/check.py`; this
module runs them side by side and turns what can go wrong before a check even
starts (the SDK extra not installed, a check that hangs) into a `CheckResult`
too, so `broker check` always answers within about `timeout` seconds.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from providers.cloud import CheckResult
from providers.registry import EXTRAS

CLOUDS: tuple[str, ...] = ("aws", "gcp", "azure")


def check_function(cloud: str) -> Callable[[float], CheckResult] | CheckResult:
    """The cloud's check, or a ready CheckResult saying why it cannot be loaded."""
    try:
        module = importlib.import_module(f"providers.{cloud}.check")
    except ImportError as exc:
        missing = getattr(exc, "name", "") or "its SDK"
        extra = EXTRAS.get(cloud, cloud)
        return CheckResult(
            cloud, False, f"SDK not installed ({missing}): pip install 'broker[{extra}]'"
        )
    return module.check


def check_clouds(clouds: Sequence[str] = CLOUDS, timeout: float = 5.0) -> list[CheckResult]:
    """A CheckResult per cloud, in the order asked; checks run in parallel and each is
    given up after `timeout` seconds (plus a small grace for the thread to answer)."""
    results: dict[str, CheckResult] = {}
    pool = ThreadPoolExecutor(max_workers=max(1, len(clouds)), thread_name_prefix="check")
    started = time.monotonic()
    futures = {}
    for cloud in clouds:
        found = check_function(cloud)
        if isinstance(found, CheckResult):
            results[cloud] = found
        else:
            futures[cloud] = pool.submit(_timed, cloud, found, timeout)
    for cloud, future in futures.items():
        left = max(0.0, timeout + 1.0 - (time.monotonic() - started))
        try:
            results[cloud] = future.result(timeout=left)
        except FutureTimeout:
            results[cloud] = CheckResult(
                cloud, False, f"no answer within {timeout:g} s", seconds=timeout
            )
    pool.shutdown(wait=False, cancel_futures=True)  # a hung SDK call must not hold us
    return [results[cloud] for cloud in clouds]


def _timed(cloud: str, check: Callable[[float], CheckResult], timeout: float) -> CheckResult:
    from providers.errors import redact

    start = time.monotonic()
    try:
        result = check(timeout)
    except Exception as exc:  # a check must report, never crash the command
        result = CheckResult(cloud, False, redact(f"check failed: {type(exc).__name__}: {exc}"))
    return CheckResult(
        result.cloud, result.usable, result.reason, result.detail, time.monotonic() - start
    )
