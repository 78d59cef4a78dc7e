"""A tiny multi-node job: every step, the ranks of a gang add up one value each over TCP.

No framework, only the gang's environment (docs/distributed.md): rank 0
(BROKER_NODE_RANK) listens on MASTER_PORT, the other ranks connect to
MASTER_ADDR:MASTER_PORT, retrying, since nodes start in no guaranteed order. Every
step each rank sends its value, rank 0 sends back the sum (an all-reduce through the
head), and all ranks keep the same running total. It keeps the broker's job contract:
- rank 0 checkpoints {step, total} (JSON, atomically) into $BROKER_CHECKPOINT_DIR every
  --checkpoint-every steps and at once on SIGTERM, then every rank exits 143;
- rank 0 resumes from $BROKER_RESUME_FROM and tells the others where to start.
The value of rank r at step s depends only on (r, s), so a gang interrupted and resumed
ends with exactly the total of one that never stopped. At the end each rank writes
`agreed-<rank>.json` (its total) beside the checkpoint: all of them must be equal.

    BROKER_NODE_RANK=0 BROKER_NUM_NODES=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 \
        python3 examples/distributed/allreduce.py --steps 50 &
    BROKER_NODE_RANK=1 BROKER_NUM_NODES=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 \
        python3 examples/distributed/allreduce.py --steps 50
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path

CHECKPOINT = "checkpoint.json"
EXIT_INTERRUPTED = 128 + signal.SIGTERM


def value(rank: int, step: int) -> int:
    """What rank `rank` contributes at step `step` (a pure function: resumable)."""
    return (rank + 1) * (step + 1)


def save(directory: Path, name: str, state: dict) -> None:
    """Write `state` atomically: a kill leaves the old file or the new one."""
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{name}.{os.getpid()}.tmp"
    with tmp.open("w") as handle:
        json.dump(state, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, directory / name)


def restore(resume_from: str) -> dict | None:
    path = Path(resume_from)
    if path.is_dir():
        path = path / CHECKPOINT
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


class Link:
    """One TCP connection carrying lines of text."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn = conn
        self.reader = conn.makefile("r", encoding="utf-8")

    def send(self, text: str) -> None:
        self.conn.sendall((text + "\n").encode())

    def receive(self) -> str | None:
        """The next line, or None when the other side has gone (it was stopped)."""
        try:
            line = self.reader.readline()
        except OSError:
            return None
        return line.strip() if line else None


def connect(host: str, port: int, deadline: float) -> Link:
    """Connect to the head, retrying until `deadline`: it may not listen yet."""
    while True:
        try:
            return Link(socket.create_connection((host, port), timeout=5))
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def listen(port: int, peers: int, deadline: float) -> list[Link]:
    """Accept one connection from every other rank; the links ordered by rank."""
    server = socket.create_server(("", port), reuse_port=False)
    server.settimeout(max(0.1, deadline - time.monotonic()))
    links: dict[int, Link] = {}
    with server:
        while len(links) < peers:
            conn, _ = server.accept()
            conn.settimeout(None)
            link = Link(conn)
            hello = link.receive() or ""
            links[int(hello.removeprefix("rank "))] = link
    return [links[rank] for rank in sorted(links)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--step-seconds", type=float, default=0.01)
    parser.add_argument("--checkpoint-every", type=int, default=10)
    parser.add_argument("--rendezvous-seconds", type=float, default=60.0)
    args = parser.parse_args(argv)

    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.append(signum))
    rank = int(os.environ.get("BROKER_NODE_RANK", "0"))
    nodes = int(os.environ.get("BROKER_NUM_NODES", "1"))
    host = os.environ.get("MASTER_ADDR", "127.0.0.1")
    port = int(os.environ.get("MASTER_PORT", "29500"))
    folder = os.environ.get("BROKER_CHECKPOINT_DIR", "")
    directory = Path(folder) if folder else None
    deadline = time.monotonic() + args.rendezvous_seconds
    if rank == 0:
        step, total = 0, 0
        state = restore(os.environ.get("BROKER_RESUME_FROM", "") or "/nonexistent")
        if state is not None:
            step, total = state["step"], state["total"]
            print(f"rank 0: resumed at step {step}", flush=True)
        peers = listen(port, nodes - 1, deadline)
        for link in peers:
            link.send(f"start {step} {total}")
        print(f"rank 0: {nodes} ranks joined on port {port}", flush=True)
    else:
        head = connect(host, port, deadline)
        head.send(f"rank {rank}")
        words = (head.receive() or "").split()
        if len(words) != 3 or words[0] != "start":
            print(f"rank {rank}: the head went away before the start", flush=True)
            return EXIT_INTERRUPTED
        step, total = int(words[1]), int(words[2])
        print(f"rank {rank}: joined the head at {host}:{port}, step {step}", flush=True)

    while step < args.steps:
        if stop:
            break
        if rank == 0:
            received = [link.receive() for link in peers]
            if any(r is None for r in received):
                break  # a rank was stopped: the gang stops as one
            total += value(0, step) + sum(int(r) for r in received if r is not None)
            for link in peers:
                link.send(str(total))
        else:
            head.send(str(value(rank, step)))
            answer = head.receive()
            if answer is None:
                break
            total = int(answer)
        step += 1
        if rank == 0 and directory is not None and step % args.checkpoint_every == 0:
            save(directory, CHECKPOINT, {"step": step, "total": total, "done": False})
        if args.step_seconds:
            time.sleep(args.step_seconds)
    if step < args.steps:
        if rank == 0 and directory is not None:
            save(directory, CHECKPOINT, {"step": step, "total": total, "done": False})
        print(f"rank {rank}: stopped at step {step}, checkpoint saved by rank 0", flush=True)
        return EXIT_INTERRUPTED
    if directory is not None:
        if rank == 0:
            save(directory, CHECKPOINT, {"step": step, "total": total, "done": True})
        save(directory, f"agreed-{rank}.json", {"rank": rank, "step": step, "total": total})
    print(f"rank {rank}: done at step {step}, total {total}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
