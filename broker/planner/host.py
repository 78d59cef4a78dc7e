"""What a GPU alternative asks of an offer's host: the manifest's vCPUs and memory, or,
where it states none, the GPU's host floor (`pricing.gpus.HOST_FLOORS`) times the GPU
count, so that "cheapest" never means a GPU starved by a 1-vCPU host.

A floor is the broker's default, not the user's ask: an offer whose figure is unknown,
and an on-prem node (hardware the team already owns, whose host is what it is), pass it.
Explicit `cpus`/`memory` always win, and apply to every offer as written.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.spec import Amount, GpuAsk, Requirements


@dataclass(frozen=True, slots=True)
class HostAsk:
    """One slice's vCPUs and memory per node; `*_default` marks a GPU floor."""

    cpus: Amount | None = None
    memory: Amount | None = None
    cpus_default: bool = False
    memory_default: bool = False
    gpu: str = ""  # the GPU alternative, for the rejection's words

    def reason(self, column: int) -> str:
        """Why the vCPU (column 0) or memory (1) filter removed an offer."""
        amount, default = (
            (self.cpus, self.cpus_default)
            if column == 0
            else (
                self.memory,
                self.memory_default,
            )
        )
        what, unit = ("vCPUs", "") if column == 0 else ("memory", " GiB")
        text = f"{what} not {_text(amount)}{unit}"
        if default:
            field = "resources.cpus" if column == 0 else "resources.memory"
            text += f" (the host default for {self.gpu}; set {field} to change it)"
        return text


def host_ask(req: Requirements, ask: GpuAsk, memo: dict) -> HostAsk:
    """The host ask of `req` for its GPU alternative `ask` (memoised in `memo`)."""
    key = (req.cpus, req.memory_gib, ask.gpu, ask.count)
    found = memo.get(key)
    if found is None:
        found = memo[key] = _host_ask(req, ask)
    return found


def _host_ask(req: Requirements, ask: GpuAsk) -> HostAsk:
    from pricing.gpus import host_floor

    floor = host_floor(ask.gpu) if ask.gpu else None
    if floor is None or (req.cpus is not None and req.memory_gib is not None):
        return HostAsk(req.cpus, req.memory_gib)
    cpus, memory = req.cpus, req.memory_gib
    cpus_default = cpus is None
    memory_default = memory is None
    if cpus_default:
        cpus = Amount(floor.vcpus_per_gpu * ask.count, at_least=True)
    if memory_default:
        memory = Amount(floor.memory_gib_per_gpu * ask.count, at_least=True)
    gpu = f"{ask.gpu}:{ask.count:g}"
    return HostAsk(cpus, memory, cpus_default, memory_default, gpu)


def default_note(req: Requirements) -> str | None:
    """The assumption a plan states when GPU host floors apply (None when none do)."""
    parts = []
    for ask in req.accelerators:
        host = _host_ask(req, ask)
        shown = []
        if host.cpus_default and host.cpus is not None:
            shown.append(f"{host.cpus.value:g}+ vCPUs")
        if host.memory_default and host.memory is not None:
            shown.append(f"{host.memory.value:g}+ GiB")
        if shown:
            parts.append(f"{host.gpu} {' and '.join(shown)}")
    if not parts:
        return None
    return (
        f"host default per node: {'; '.join(parts)} (resources.cpus/memory not set; "
        "the smallest host the clouds pair with the GPU; on-prem nodes exempt)"
    )


def _text(amount: Amount | None) -> str:
    return "" if amount is None else f"{amount.value:g}{'+' if amount.at_least else ''}"
