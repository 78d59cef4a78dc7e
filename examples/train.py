"""A tiny real training job: logistic regression by SGD on synthetic data, in pure Python.

It keeps the broker's job contract, which any real job should keep too:
- checkpoint (step + weights, JSON, written atomically) into $BROKER_CHECKPOINT_DIR
  every --checkpoint-every steps, and at once on SIGTERM, then exit 143;
- after each checkpoint, write the time it was taken to .broker-checkpoint beside it
  (the broker counts lost work from that time: docs/spot.md);
- resume from $BROKER_RESUME_FROM (a checkpoint file or a directory holding one).
The sample used at a step depends only on the step, so a run that is interrupted and
resumed ends with exactly the weights of a run that never stopped.

    python examples/train.py --steps 200 --step-seconds 0.005
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

CHECKPOINT = "checkpoint.json"
MARKER = ".broker-checkpoint"  # when the last checkpoint was taken (ISO 8601, UTC)
EXIT_INTERRUPTED = 128 + signal.SIGTERM
FEATURES, SAMPLES = 4, 256

Sample = tuple[list[float], float]


def make_data(seed: int) -> list[Sample]:
    """Points labelled by a hidden logistic model, so there is something to learn."""
    rng = random.Random(seed)
    hidden = [rng.uniform(-2.0, 2.0) for _ in range(FEATURES)]
    data = []
    for _ in range(SAMPLES):
        x = [rng.gauss(0.0, 1.0) for _ in range(FEATURES)]
        p = sigmoid(sum(w * v for w, v in zip(hidden, x, strict=True)) + 0.5)
        data.append((x, 1.0 if rng.random() < p else 0.0))
    return data


def sigmoid(z: float) -> float:
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


def loss(weights: list[float], bias: float, data: list[Sample]) -> float:
    """Mean log loss over the data set."""
    total = 0.0
    for x, y in data:
        p = sigmoid(sum(w * v for w, v in zip(weights, x, strict=True)) + bias)
        p = min(max(p, 1e-12), 1 - 1e-12)
        total -= y * math.log(p) + (1 - y) * math.log(1 - p)
    return total / len(data)


def sgd_step(
    weights: list[float], bias: float, sample: Sample, lr: float
) -> tuple[list[float], float]:
    x, y = sample
    error = sigmoid(sum(w * v for w, v in zip(weights, x, strict=True)) + bias) - y
    return [w - lr * error * v for w, v in zip(weights, x, strict=True)], bias - lr * error


def save(directory: Path, step: int, weights: list[float], bias: float, done: bool) -> None:
    """Write the checkpoint atomically (a kill leaves the old one or the new one), then
    the marker with the time its state was taken."""
    taken = datetime.now(UTC)
    directory.mkdir(parents=True, exist_ok=True)
    state = {"step": step, "weights": weights, "bias": bias, "done": done}
    _write_atomically(directory / CHECKPOINT, json.dumps(state))
    _write_atomically(directory / MARKER, f"{taken.isoformat()}\nstep {step}\n")


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def restore(resume_from: str) -> dict | None:
    """The checkpoint at `resume_from` (a file, or a directory holding one), or None."""
    path = Path(resume_from)
    if path.is_dir():
        path = path / CHECKPOINT
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        print(f"no checkpoint at {path}; starting from step 0", file=sys.stderr, flush=True)
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--step-seconds", type=float, default=0.005, help="sleep per step")
    parser.add_argument("--checkpoint-every", type=int, default=20)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)

    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.append(signum))
    checkpoint_dir = os.environ.get("BROKER_CHECKPOINT_DIR", "")
    directory = Path(checkpoint_dir) if checkpoint_dir else None
    data = make_data(args.seed)
    step, weights, bias = 0, [0.0] * FEATURES, 0.0
    resume_from = os.environ.get("BROKER_RESUME_FROM", "")
    state = restore(resume_from) if resume_from else None
    if state is not None:
        step, weights, bias = state["step"], state["weights"], state["bias"]
        print(f"resumed from step {step} ({resume_from})", flush=True)
    print(f"training: steps {step}..{args.steps}, checkpoints in {directory}", flush=True)

    while step < args.steps:
        if stop:
            if directory is not None:
                save(directory, step, weights, bias, done=False)
            print(f"interrupted by SIGTERM at step {step}: checkpoint saved", flush=True)
            return EXIT_INTERRUPTED
        weights, bias = sgd_step(weights, bias, data[step % len(data)], args.lr)
        step += 1
        if step % args.checkpoint_every == 0 or step == args.steps:
            if directory is not None:
                save(directory, step, weights, bias, done=step == args.steps)
            print(f"step {step}/{args.steps} loss {loss(weights, bias, data):.4f}", flush=True)
        if args.step_seconds:
            time.sleep(args.step_seconds)
    print(f"done at step {step}, loss {loss(weights, bias, data):.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
