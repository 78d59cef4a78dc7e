"""Executors: how an on-prem pool's attempts reach its nodes (local, ssh, slurm).

`executor_for(pool, workdir)` builds the executor a pool's `executor:` mapping names;
each kind's module is imported only when a pool of that kind is used.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from onprem.executors.base import Executor
    from onprem.inventory import Pool


def executor_for(pool: Pool, workdir: Path, provider: str = "onprem") -> Executor:
    """The executor of `pool`; `workdir` holds what a local or Slurm executor keeps here
    (attempt directories, per pool)."""
    from onprem.executors.options import LocalOptions, SlurmOptions, SshOptions

    options = pool.executor.options
    if isinstance(options, SlurmOptions):
        from onprem.executors.slurm import SlurmExecutor

        return SlurmExecutor(options, pool.name, Path(workdir), provider)
    if isinstance(options, SshOptions):
        from onprem.executors.nodes import SshExecutor

        nodes = [(node.name, node.address, node.port) for node in pool.nodes]
        return SshExecutor(nodes, options, provider)
    if isinstance(options, LocalOptions):
        from onprem.executors.nodes import LocalExecutor

        nodes = [node.name for node in pool.nodes]
        return LocalExecutor(nodes, options, Path(workdir) / pool.name, provider)
    raise TypeError(f"no executor for {type(options).__name__}")
