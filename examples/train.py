"""A real, deterministic data-parallel training job for Gangway: a small numpy MLP on a synthetic data set.

Each of WORLD_SIZE workers computes the gradient of its shard of the step's batch; rank 0 gathers them
over TCP (MASTER_ADDR:MASTER_PORT), averages them in rank order and sends the average back, so every
rank applies the same update. Rank 0 checkpoints the weights every --checkpoint-every steps and when it
receives SIGUSR1 (Gangway's preemption notice), writing $GANGWAY_CHECKPOINT_DIR/step-NNNNNN.npy and then
reporting the step as one JSON line on $GANGWAY_CHECKPOINT_REPORT. A worker started with
GANGWAY_RESUME_STEP=N loads step N and goes on from there. Batches are drawn from (seed, step), so a run
that is preempted, killed and resumed ends with exactly the weights of one that never stopped; rank 0
saves them as $GANGWAY_CHECKPOINT_DIR/final.npy.

    python examples/train.py --reference --world-size 2 --out /tmp/reference.npy   # the same run in one process
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

import numpy as np

INPUTS, HIDDEN, SAMPLES = 8, 16, 2048


def data(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A fixed regression task: targets from a random teacher network, plus noise."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((SAMPLES, INPUTS))
    teacher = rng.standard_normal((INPUTS, 1))
    y = np.tanh(x @ teacher) + 0.1 * rng.standard_normal((SAMPLES, 1))
    return x, y


def initial_weights(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed + 1)
    w1 = rng.standard_normal((INPUTS, HIDDEN)) / np.sqrt(INPUTS)
    w2 = rng.standard_normal((HIDDEN, 1)) / np.sqrt(HIDDEN)
    return np.concatenate([w1.ravel(), np.zeros(HIDDEN), w2.ravel(), np.zeros(1)])


def gradient(weights: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The mean-squared-error gradient of the MLP on one shard, flattened like the weights."""
    w1 = weights[:INPUTS * HIDDEN].reshape(INPUTS, HIDDEN)
    b1 = weights[INPUTS * HIDDEN:INPUTS * HIDDEN + HIDDEN]
    w2 = weights[INPUTS * HIDDEN + HIDDEN:-1].reshape(HIDDEN, 1)
    b2 = weights[-1:]
    h = np.tanh(x @ w1 + b1)
    error = (h @ w2 + b2) - y
    d_out = 2 * error / len(x)
    d_h = (d_out @ w2.T) * (1 - h * h)
    return np.concatenate([(x.T @ d_h).ravel(), d_h.sum(0), (h.T @ d_out).ravel(), d_out.sum(0)])


def shard(step: int, seed: int, batch: int, rank: int, world: int) -> np.ndarray:
    """Rank `rank`'s part of step `step`'s batch: the same whichever attempt runs the step."""
    indices = np.random.default_rng([seed, step]).choice(SAMPLES, batch, replace=False)
    return indices[rank::world]


def average(gradients: list[np.ndarray]) -> np.ndarray:
    """The mean in rank order (the same float operations on every run)."""
    total = gradients[0].copy()
    for g in gradients[1:]:
        total = total + g
    return total / len(gradients)


def reference(steps: int, world: int, seed: int, batch: int, lr: float) -> np.ndarray:
    """The whole run in one process, ranks simulated in turn: what every real run must end with."""
    x, y = data(seed)
    weights = initial_weights(seed)
    for step in range(steps):
        shards = [shard(step, seed, batch, rank, world) for rank in range(world)]
        grads = [gradient(weights, x[idx], y[idx]) for idx in shards]
        weights = weights - lr * average(grads)
    return weights


class Gang:
    """Gradient averaging over TCP: rank 0 listens, the others connect; one exchange per step."""

    def __init__(self, rank: int, world: int, address: str, port: int, size: int, timeout: float = 60.0) -> None:
        self.rank, self.world, self.bytes = rank, world, size * 8
        self.peers: list[socket.socket] = []
        if world == 1:
            return
        if rank == 0:
            server = socket.create_server((address, port), reuse_port=False)
            server.settimeout(timeout)
            by_rank = {}
            while len(by_rank) < world - 1:
                conn, _ = server.accept()
                conn.settimeout(timeout)
                by_rank[int.from_bytes(self._recv(conn, 4), "big")] = conn
            server.close()
            self.peers = [by_rank[r] for r in range(1, world)]
        else:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    conn = socket.create_connection((address, port), timeout=timeout)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
            conn.sendall(rank.to_bytes(4, "big"))
            self.peers = [conn]

    def average(self, grad: np.ndarray) -> np.ndarray:
        if self.world == 1:
            return average([grad])
        if self.rank == 0:
            mean = average([grad, *(np.frombuffer(self._recv(p, self.bytes), dtype=np.float64) for p in self.peers)])
            for p in self.peers:
                p.sendall(mean.tobytes())
            return mean
        self.peers[0].sendall(grad.tobytes())
        return np.frombuffer(self._recv(self.peers[0], self.bytes), dtype=np.float64).copy()

    @staticmethod
    def _recv(conn: socket.socket, n: int) -> bytes:
        chunks, got = [], 0
        while got < n:
            chunk = conn.recv(n - got)
            if not chunk:
                raise ConnectionError("a peer of the gang went away")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)


def save(path: Path, weights: np.ndarray) -> None:
    """Atomically: a reader sees the old file or the whole new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        np.save(f, weights)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint-every", type=int, default=50,
                        help="steps between checkpoints (0: only on SIGUSR1)")
    parser.add_argument("--step-time", type=float, default=0.02,
                        help="seconds each step lasts at least (paces the demo)")
    parser.add_argument("--checkpoint-delay", type=float, default=0.0,
                        help="seconds a checkpoint asked for by SIGUSR1 takes to write (as a big model's would)")
    parser.add_argument("--reference", action="store_true", help="run every rank in this process, no Gangway needed")
    parser.add_argument("--world-size", type=int, default=None, help="with --reference: how many ranks")
    parser.add_argument("--out", type=Path, default=None,
                        help="final weights (default $GANGWAY_CHECKPOINT_DIR/final.npy)")
    args = parser.parse_args(argv)
    checkpoints = Path(os.environ.get("GANGWAY_CHECKPOINT_DIR") or ".")
    out = args.out or checkpoints / "final.npy"
    if args.reference:
        save(out, reference(args.steps, args.world_size or 1, args.seed, args.batch, args.lr))
        return 0

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    asked = []
    signal.signal(signal.SIGUSR1, lambda *_: asked.append(True))
    start = int(os.environ.get("GANGWAY_RESUME_STEP") or 0)
    weights = np.load(checkpoints / f"step-{start:06d}.npy") if start else initial_weights(args.seed)
    print(f"rank {rank}/{world} attempt {os.environ.get('GANGWAY_ATTEMPT', '-')} starts at step {start}", flush=True)
    x, y = data(args.seed)
    try:
        gang = Gang(rank, world, os.environ.get("MASTER_ADDR", "127.0.0.1"), int(os.environ.get("MASTER_PORT", 29500)),
                    len(weights))
        for step in range(start, args.steps):
            began = time.monotonic()
            idx = shard(step, args.seed, args.batch, rank, world)
            weights = weights - args.lr * gang.average(gradient(weights, x[idx], y[idx]))
            done = step + 1
            periodic = args.checkpoint_every and done % args.checkpoint_every == 0
            if rank == 0 and done < args.steps and (asked or periodic):
                if asked:
                    time.sleep(args.checkpoint_delay)
                checkpoint(checkpoints, done, weights)
                asked.clear()
            time.sleep(max(0.0, args.step_time - (time.monotonic() - began)))
    except (ConnectionError, OSError) as error:
        print(f"rank {rank}: {error}", file=sys.stderr, flush=True)
        return 1
    if rank == 0:
        save(out, weights)
    print(f"rank {rank} finished {args.steps} steps", flush=True)
    return 0


def checkpoint(directory: Path, step: int, weights: np.ndarray) -> None:
    """Saves the weights after `step` steps, then tells the agent (one JSON line, appended whole)."""
    save(directory / f"step-{step:06d}.npy", weights)
    report = os.environ.get("GANGWAY_CHECKPOINT_REPORT")
    if report:
        with open(report, "a") as f:
            f.write(json.dumps({"step": step}) + "\n")


if __name__ == "__main__":
    sys.exit(main())
