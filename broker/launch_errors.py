"""How a failed launch is recorded, and read back by its error class.

A launch the provider refuses closes its attempt failed with the reason
`<ErrorClass>: <provider's message>`, the class being one of the taxonomy's
(`providers.errors`). The metrics count launch failures by that class from the state
alone (`broker.metrics.figures`), so a restarted controller, or a dashboard host with
no controller, counts the same; the set of classes is fixed by the code, so the label
stays bounded whatever a provider's message says.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from providers.errors import ProviderError

BROKER_ERROR = "BrokerError"  # the broker's own code raised while launching
OTHER = "other"  # anything else (e.g. a job this provider cannot run)


def launch_failure_reason(exc: ProviderError) -> str:
    """The reason a refused launch is closed with: its class, then its message."""
    return f"{type(exc).__name__}: {exc}"


def error_classes() -> frozenset[str]:
    """The names of the taxonomy's classes (`providers.errors`): the label's values."""
    from providers import errors

    found: set[str] = set()
    todo: list[type] = [errors.ProviderError]
    while todo:
        cls = todo.pop()
        if cls.__module__ == errors.__name__:
            found.add(cls.__name__)
        todo.extend(cls.__subclasses__())
    return frozenset(found)


def error_class_of(reason: str, classes: frozenset[str]) -> str:
    """The error class a failed launch's `reason` names: a taxonomy class, BrokerError
    (`broker.controller.isolation`'s "error while launching: ..."), else "other"."""
    from broker.controller.isolation import ERROR

    head = reason.split(":", 1)[0].strip()
    if head in classes:
        return head
    if head.startswith(f"{ERROR} while"):
        return BROKER_ERROR
    return OTHER
