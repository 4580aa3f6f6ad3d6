"""Issue 12's target 1, measured: each trace on its own cell under every policy and seed, and the table that says
where Gangway has the lowest average JCT and queue and a p99 queue within 10% of the best baseline's.

    python tests/benchmarks/bench_traces.py --out DIR [--traces T,...] [--policies P,...] [--seeds 0,1,2]
                                            [--workers 2] [--gpus 1.2x] [--table-only]

Each run is `gangway sim run --trace T --gpus 1.2x --no-private --seed S --policy P --json DIR/T.P.S.json`, a
process of its own, `--workers` at a time; a run whose JSON is already in DIR is not run again, so an interrupted
measurement resumes. The table takes the median of the seeds per figure and compares the first policy (gangway)
with the best of the baselines of target 1 (fifo, static, kueue-like, backfill) per figure; tiresias (target 2)
is shown beside them but is not a baseline of target 1. Traces: the eight ITP clusters, Philly's VC and the
eight merged (`merged`); cluster01 runs on 64 GPUs, the smallest cell that holds its largest job.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT.parent / "shared" / "traces"
ITP = TRACES / "microsoft-itp-2021"
SOURCES = {
    **{f"cluster{n:02d}": ITP / f"cluster{n:02d}.csv" for n in (1, 2, 3, 4, 5, 7, 8, 9)},
    "philly_103959": TRACES / "philly-vc103959" / "philly_103959.csv",
    "merged": ITP,
}
#: cluster01's largest job (64 GPUs) does not fit a cell of 1.2x its average demand (40 GPUs): it runs on the smallest
#: cell of whole nodes that holds it, as a user told "use more --gpus" would.
LEAST_GPUS = {"cluster01": 64}
POLICIES = ["gangway", "fifo", "static", "kueue-like", "backfill", "tiresias"]
BASELINES = ("fifo", "static", "kueue-like", "backfill")  # target 1's four; tiresias belongs to target 2
FIGURES = (("avg_jct_s", "avg JCT"), ("avg_queue_s", "avg queue"), ("p99_queue_s", "p99 queue"))
P99_SLACK = 1.10


def run_one(out: Path, trace: str, policy: str, seed: int, gpus: str) -> str:
    path = out / f"{trace}.{policy}.{seed}.json"
    if path.exists():
        return f"{path.name}: kept"
    gpus = str(LEAST_GPUS[trace]) if trace in LEAST_GPUS and gpus == "1.2x" else gpus
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "replay.cli", "sim", "run", "--trace", str(SOURCES[trace]), "--gpus", gpus,
         "--no-private", "--no-progress", "--seed", str(seed), "--policy", policy, "--json", str(path) + ".part"],
        cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        return f"{path.name}: FAILED (exit {done.returncode}): {done.stderr.strip().splitlines()[-1:]}"
    Path(str(path) + ".part").rename(path)
    return f"{path.name}: {time.perf_counter() - started:.0f} s"


def medians(out: Path, trace: str, policy: str, seeds: list[int]) -> dict[str, float] | None:
    runs = [json.loads(p.read_text())["metrics"] for s in seeds if (p := out / f"{trace}.{policy}.{s}.json").exists()]
    if len(runs) < len(seeds):
        return None
    return {key: statistics.median(r[key] for r in runs) for key, _ in FIGURES}


def table(out: Path, traces: list[str], policies: list[str], seeds: list[int]) -> list[str]:
    ours = policies[0]
    lines = [f"| trace | {ours}: avg JCT / avg queue / p99 queue (h) | best baseline's avg JCT | best avg queue | "
             f"best p99 queue (10% above it) | met (JCT, queue, p99) | "
             + " | ".join(p for p in policies[1:]) + " |",
             "| --- " * (6 + len(policies) - 1) + "|"]
    met_total = ties = cells = 0
    for trace in traces:
        figures = {p: medians(out, trace, p, seeds) for p in policies}
        mine = figures[ours]
        baselines = {p: f for p, f in figures.items() if p in BASELINES and f is not None}
        if mine is None or not baselines:
            lines.append(f"| {trace} | (runs missing) |" + " |" * (4 + len(policies)))
            continue
        best = {key: min(baselines.items(), key=lambda item: item[1][key]) for key, _ in FIGURES}
        lowest = [_compared(mine[key], best[key][1][key]) for key in ("avg_jct_s", "avg_queue_s")]
        met = [*lowest, "yes" if mine["p99_queue_s"] <= P99_SLACK * best["p99_queue_s"][1]["p99_queue_s"]
               else "**no**"]
        met_total += met.count("yes")
        ties += met.count("tie")
        cells += 3
        hours = " / ".join(f"{mine[key] / 3600:.2f}" for key, _ in FIGURES)
        p99_best = best["p99_queue_s"][1]["p99_queue_s"] / 3600
        others = [" / ".join(f"{f[key] / 3600:.2f}" for key, _ in FIGURES) if f else "-" for p, f in figures.items()
                  if p != ours]
        lines.append(
            f"| {trace} | {hours} | {best['avg_jct_s'][1]['avg_jct_s'] / 3600:.2f} ({best['avg_jct_s'][0]}) | "
            f"{best['avg_queue_s'][1]['avg_queue_s'] / 3600:.2f} ({best['avg_queue_s'][0]}) | "
            f"{p99_best:.1f} ({best['p99_queue_s'][0]}; {P99_SLACK * p99_best:.1f}) | "
            + ", ".join(met) + " | " + " | ".join(others) + " |")
    lines.append(f"\n{met_total} of {cells} figures met, medians of seeds {', '.join(map(str, seeds))} "
                 f"({ties} more tied with the best baseline: not lower, so not counted).")
    return lines


def _compared(mine: float, best: float) -> str:
    return "yes" if mine < best else "tie" if mine == best else "**no**"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="folder for the runs' JSON (kept between runs)")
    parser.add_argument("--traces", default=",".join(SOURCES), help=f"comma-separated, of: {', '.join(SOURCES)}")
    parser.add_argument("--policies", default=",".join(POLICIES), help="comma-separated; the first is compared")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--workers", type=int, default=2, help="runs at a time (each is one process)")
    parser.add_argument("--gpus", default="1.2x")
    parser.add_argument("--table-only", action="store_true", help="print the table of the runs already in --out")
    args = parser.parse_args()
    traces, policies = args.traces.split(","), args.policies.split(",")
    unknown = [t for t in traces if t not in SOURCES]
    if unknown:
        parser.error(f"unknown trace(s) {', '.join(unknown)}; known: {', '.join(SOURCES)}")
    seeds = [int(s) for s in args.seeds.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.table_only:
        # the biggest runs first, so the last ones to finish are short
        jobs = sorted(((t, p, s) for t in traces for p in policies for s in seeds),
                      key=lambda job: (job[0] != "merged", -SOURCES[job[0]].stat().st_size if job[0] != "merged"
                                       else 0))
        with ThreadPoolExecutor(args.workers) as pool:
            for line in pool.map(lambda job: run_one(args.out, *job, args.gpus), jobs):
                print(line, flush=True)
    print("\n".join(table(args.out, traces, policies, seeds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
