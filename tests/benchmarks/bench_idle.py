"""Issue 12's target 4, taken apart: where the GPUs that idle while work waits sit, per trace and policy.

    python tests/benchmarks/bench_idle.py [--traces T,...] [--policies P,...] [--seed 0]

Each run is the simulator's (`gangway sim run --trace T --gpus 1.2x --no-private`; cluster01 on 64 GPUs, as in
bench_traces.py) with one more observer of the log. After every event it splits the free GPUs of schedulable
nodes, while some job waits, into: free on nodes reserved for a waiting gang; free elsewhere while some waiting gang
(past its back-off) needs no more GPUs than that, by the stated reason of the first such gang in priority and
submission order (WOULD_DELAY_QUEUE_HEAD: kept for its team's queue head); free elsewhere while every waiting gang
needs more. Each share is GPU-time over the capacity-time while work waits, the result JSON's `idle_while_waiting`
taken apart (their sum is that figure).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from events import models as m  # noqa: E402
from replay.runner import VirtualCell  # noqa: E402
from replay.sim.run import run  # noqa: E402
from replay.sim.workload import SimConfig, build_workload  # noqa: E402
from tests.benchmarks.bench_traces import BASELINES, LEAST_GPUS, SOURCES  # noqa: E402

RESERVED, NONE_FITS = "on reserved nodes", "no waiting gang fits in number"
GUARD = m.Reason.WOULD_DELAY_QUEUE_HEAD.value


class IdleCauses:
    """Observer: integrates free GPUs while work waits, by where they sit (see the module's docstring)."""

    def __init__(self) -> None:
        self.t: int | None = None
        self.now: dict[str, int] = {}  # GPUs by cause after the last event, "capacity" among them
        self.gpu_ms: Counter[str] = Counter()

    def __call__(self, cell: VirtualCell, event: m.Event, offset: int) -> None:
        at = event.envelope.at
        if self.t is not None and at > self.t:
            for cause, gpus in self.now.items():
                self.gpu_ms[cause] += gpus * (at - self.t)
        self.t = at if self.t is None else max(self.t, at)
        self.now = self.causes(cell, at)

    @staticmethod
    def causes(cell: VirtualCell, at: int) -> dict[str, int]:
        state = cell.state
        if not state.queued:
            return {}
        nodes = [n for n in state.cluster.nodes.values() if n.schedulable]
        reserved = sum(n.free for n in nodes if n.reserved_for)
        elsewhere = sum(n.free for n in nodes) - reserved
        now = {"capacity": sum(n.healthy_gpus for n in nodes), RESERVED: reserved}
        if elsewhere:
            ready = [state.jobs[j] for j in state.queued if state.jobs[j].not_before <= at]
            fits = [j for j in ready if j.min_gpus <= elsewhere]
            first = min(fits, key=lambda j: (-j.priority, j.submitted_at, j.job_id)) if fits else None
            now[NONE_FITS if first is None else f"a gang fits in number: {first.reason.value}"] = elsewhere
        return now

    def shares(self) -> dict[str, float]:
        capacity = self.gpu_ms["capacity"]
        return {cause: gpu_ms / capacity for cause, gpu_ms in self.gpu_ms.items() if cause != "capacity" and capacity}


def measure(trace: str, policy: str, seed: int) -> tuple[float, dict[str, float]]:
    gpus = str(LEAST_GPUS.get(trace, "1.2x"))
    config = SimConfig(gpus=gpus, seed=seed, private=False)
    workload = build_workload([SOURCES[trace]], config, None)
    causes = IdleCauses()
    result, _ = run(workload, policy, config, observers=[causes])
    return result["metrics"]["idle_while_waiting"], causes.shares()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", default="cluster01,cluster03,cluster05,philly_103959",
                        help=f"comma-separated, of: {', '.join(SOURCES)}")
    parser.add_argument("--policies", default=",".join(["gangway", *BASELINES]))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    traces = [t for t in args.traces.split(",") if t]
    unknown = [t for t in traces if t not in SOURCES]
    if unknown:
        parser.error(f"unknown trace(s) {', '.join(unknown)}; known: {', '.join(SOURCES)}")
    print("| trace | policy | idle while waiting | on reserved nodes | kept for a queue head (a gang fits in number: "
          f"{GUARD}) | a gang fits in number, other reasons | {NONE_FITS} |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for trace in traces:
        for policy in [p for p in args.policies.split(",") if p]:
            idle, shares = measure(trace, policy, args.seed)
            guard = sum(v for k, v in shares.items() if k.endswith(GUARD))
            other = sum(v for k, v in shares.items() if k.startswith("a gang fits") and not k.endswith(GUARD))
            parts = (shares.get(RESERVED, 0.0), guard, other, shares.get(NONE_FITS, 0.0))
            assert abs(sum(parts) - idle) < 1e-3, (trace, policy, idle, shares)  # the JSON's figure, taken apart
            print(f"| {trace} | {policy} | {idle:.2%} | " + " | ".join(f"{p:.2%}" for p in parts) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
