"""A Slurm gang: one `sbatch --nodes=N` whose batch script runs the job once per node.

The batch script (`slurm_text.batch_script`) starts `srun --ntasks-per-node=1
--kill-on-bad-exit=1`, one task per node: any rank failing ends the others (all or
nothing), and SIGTERM (scancel, --signal, a preemption) reaches every rank through
srun. Each task derives the gang's environment (docs/distributed.md) from Slurm's
own before it runs the start-up script: its rank from SLURM_NODEID, the nodes from
`scontrol show hostnames $SLURM_JOB_NODELIST` (head first, as Slurm numbers them),
each node's address from its NodeAddr (a name resolved with getent), and a
MASTER_PORT of the job's own (from its job id), so two gangs on one head never meet.
"""

from __future__ import annotations

FIRST_PORT, PORTS = 20000, 20000  # MASTER_PORT = FIRST_PORT + job id mod PORTS

RANK_ENVIRONMENT = r"""BROKER_NODE_RANK=${SLURM_NODEID:-0}
BROKER_NUM_NODES=${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-1}}
BROKER_NODE_IPS=$(for h in $(scontrol show hostnames "$SLURM_JOB_NODELIST"); do
  a=$(scontrol show node -o "$h" 2>/dev/null | tr ' ' '\n' | sed -n 's/^NodeAddr=//p')
  a=${a:-$h}
  case $a in *[!0-9.]*) i=$(getent hosts "$a" | awk '{print $1; exit}'); a=${i:-$a} ;; esac
  printf '%s\n' "$a"
done)
MASTER_ADDR=$(printf '%s\n' "$BROKER_NODE_IPS" | head -n 1)
MASTER_PORT=$(({first} + ${SLURM_JOB_ID:-0} % {ports}))
export BROKER_NODE_RANK BROKER_NUM_NODES BROKER_NODE_IPS MASTER_ADDR MASTER_PORT
export NNODES="$BROKER_NUM_NODES" NODE_RANK="$BROKER_NODE_RANK"
export BROKER_GPUS_PER_NODE={gpus} WORLD_SIZE=$((BROKER_NUM_NODES * {world_gpus}))
exec /bin/sh -c "$broker_script"
"""


def task_script(gpus_per_node: int) -> str:
    """What each node's task runs: the rank environment, then the start-up script (in
    the exported `broker_script`)."""
    return (
        RANK_ENVIRONMENT.replace("{first}", str(FIRST_PORT))
        .replace("{ports}", str(PORTS))
        .replace("{gpus}", str(gpus_per_node))
        .replace("{world_gpus}", str(max(1, gpus_per_node)))
    )


def gang_start(gpus_per_node: int, end: str) -> list[str]:
    """The batch script's lines that start a gang (in place of starting the script on
    the batch node alone); `end` closes the here-document."""
    return [
        "export broker_script",
        f"broker_task=$(cat <<'{end}'",
        task_script(gpus_per_node).rstrip("\n"),
        end,
        ")",
        "export broker_task",
        # --export=ALL: the batch's SLURM_EXPORT_ENV (sbatch --export) would drop the task
        "setsid srun --export=ALL --ntasks-per-node=1 --kill-on-bad-exit=1 "
        '/bin/sh -c "$broker_task" &',
    ]
