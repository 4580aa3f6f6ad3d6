"""`gangway sim`: replays job traces through the deciders in virtual time under a policy, and measures.

    gangway sim --trace PATH [--trace PATH ...] --gpus N|1.2x --policy NAME [--seed S] [--json OUT] [--report DIR]
    gangway sim compare --trace PATH ... --gpus N|1.2x [--policies gangway,fifo,...] [--json OUT] [--report DIR]

A trace is an ITP cluster CSV, the Philly VC file, or a folder of them (every trace in it); each
file is one team. `--nodes-csv` builds a heterogeneous cell from a node list (Alibaba openb)
instead of `--gpus`. Exit codes: 0 done, 1 bad input (missing file, unknown policy, cell too
small), 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from events.arguments import count, non_negative, output_dir, output_file, positive_int, within
from events.logfile import CannotWriteLog, write_log_file
from replay.sim import report
from replay.sim.failed import DeciderFailed
from replay.sim.progress import ProgressBar
from replay.sim.run import run as run_policy
from replay.sim.workload import SimConfig, build_workload
from services.policies import CATALOGUE, UnknownPolicy, resolve


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("mode", nargs="?", choices=("run", "compare"), default="run",
                        help="run one policy (default) or compare several side by side")
    parser.add_argument("--trace", action="append", required=True, type=Path, metavar="PATH",
                        help="job trace CSV or folder of them (repeatable); each file is a team")
    cell = parser.add_argument_group("cell")
    cell.add_argument("--gpus", metavar="N|Fx",
                      help="GPUs in the cell, or F times the traces' average demand (e.g. 1.2x)")
    cell.add_argument("--gpus-per-node", type=positive_int, default=8)
    cell.add_argument("--nodes-per-rack", type=positive_int, default=16)
    cell.add_argument("--racks-per-block", type=positive_int, default=8)
    cell.add_argument("--nodes-csv", type=Path, metavar="PATH",
                      help="heterogeneous cell from a node list with sn,gpu,model columns (Alibaba openb)")
    pol = parser.add_argument_group("policy and tenancy")
    pol.add_argument("--policy", default="gangway", help=f"one of: {', '.join(CATALOGUE)} (default gangway), or a version with knobs "
                          "overridden, e.g. 'gangway-2+admission.reservation_after_ms=\"1h\"'")
    pol.add_argument("--policies", default=",".join(CATALOGUE), help="for compare: comma-separated policy names or versions")
    pol.add_argument("--borrowing-limit", type=non_negative, metavar="F",
                     help="each team may borrow at most F x its nominal quota (default: unlimited)")
    pol.add_argument("--lending-limit", type=non_negative, metavar="F",
                     help="each team lends at most F x its nominal quota (default: all of it)")
    pol.add_argument("--no-private", action="store_true",
                     help="skip the private-cluster runs (private_avg_queue_s becomes null)")
    agents = parser.add_argument_group("simulated agents and failures")
    agents.add_argument("--seed", type=int, default=0)
    agents.add_argument("--tick-s", type=positive_int, default=60, help="clock tick in virtual seconds (default 60)")
    agents.add_argument("--checkpoint-every-min", type=non_negative, default=30, help="0 turns periodic checkpoints off")
    agents.add_argument("--checkpoint-cost-s", type=count, default=30, help="training pause per periodic checkpoint")
    agents.add_argument("--restart-cost-s", type=count, default=120, help="time a restarted attempt needs before progress")
    agents.add_argument("--failures-per-1000-gpu-days", type=non_negative, default=0.5,
                        help="per-GPU hardware failure rate (Poisson); 0 turns failures off")
    agents.add_argument("--repair-h", type=within(float, 0), default=24, help="hours until failed hardware is back")
    agents.add_argument("--max-restarts", type=count, default=3, help="failures a job survives")
    agents.add_argument("--time-limit-factor", type=non_negative, default=2.0, metavar="F",
                        help="each job asks for F x its duration + 1 h as its time limit (0: no limits); "
                             "backfill onto reserved nodes needs them")
    out = parser.add_argument_group("output")
    out.add_argument("--json", type=output_file, metavar="OUT", help="write the result JSON here")
    out.add_argument("--report", type=output_dir, metavar="DIR", help="write a Markdown report and PNG plots here")
    out.add_argument("--limit", type=positive_int, metavar="N", help="only the first N jobs (in submission order)")
    out.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    out.add_argument("--export-log", type=output_file, metavar="OUT",
                     help="write the shared cell's log to OUT (mode run), for the audit commands' --log")
    out.add_argument("--estimates", action="store_true",
                     help="record each waiting job's estimated start as its queue position changes and score it "
                          "against its real start (slower; the result JSON gains `estimates`)")


def config_from(args: argparse.Namespace) -> SimConfig:
    return SimConfig(
        gpus=args.gpus, gpus_per_node=args.gpus_per_node, nodes_per_rack=args.nodes_per_rack,
        racks_per_block=args.racks_per_block, nodes_csv=str(args.nodes_csv) if args.nodes_csv else None,
        seed=args.seed, tick_s=args.tick_s,
        checkpoint_every_s=round(args.checkpoint_every_min * 60) or None, checkpoint_cost_s=args.checkpoint_cost_s,
        restart_cost_s=args.restart_cost_s, failures_per_1000_gpu_days=args.failures_per_1000_gpu_days,
        repair_s=round(args.repair_h * 3600), max_restarts=args.max_restarts,
        time_limit_factor=args.time_limit_factor or None,
        borrowing_limit=args.borrowing_limit, lending_limit=args.lending_limit, private=not args.no_private,
        estimates=args.estimates,
    )


def run(args: argparse.Namespace) -> int:
    names = [p.strip() for p in args.policies.split(",") if p.strip()] if args.mode == "compare" else [args.policy]
    if not names:
        print("gangway sim: --policies names no policy", file=sys.stderr)
        return 2
    try:
        for name in names:
            resolve(name)
    except UnknownPolicy as error:
        print(f"gangway sim: {error}", file=sys.stderr)
        return 1
    if args.gpus is None and args.nodes_csv is None:
        print("gangway sim: give the cell: --gpus N, --gpus 1.2x, or --nodes-csv PATH", file=sys.stderr)
        return 2
    config = config_from(args)
    try:
        workload = build_workload(args.trace, config, args.limit)
    except (OSError, ValueError) as e:
        print(f"gangway sim: {e}", file=sys.stderr)
        return 1
    results = []
    show = not args.no_progress
    for name in names:
        bar = ProgressBar(name) if show else None
        wall = time.perf_counter()
        private_bars = []

        def private_bar(team: str, name: str = name) -> ProgressBar | None:
            if not show:
                return None
            private_bars.append(ProgressBar(f"{name} private {team}"))
            if len(private_bars) > 1:
                private_bars[-2].close()
            return private_bars[-1]

        logged: list = []
        keeping = args.export_log and args.mode == "run"
        keep = [lambda cell, event, offset: logged.append((offset, event))] if keeping else []
        try:
            result, outcome = run_policy(workload, name, config, bar, private_bar, keep)
        except DeciderFailed as error:
            print(f"gangway sim: {name}: {error}; a run whose decider fails measures nothing, so it stopped",
                  file=sys.stderr)
            return 1
        if args.export_log and args.mode == "run":
            try:
                write_log_file(args.export_log, "sim", logged, source=f"gangway sim {name} {' '.join(workload.traces)}")
            except CannotWriteLog as error:
                print(f"gangway sim: {error}", file=sys.stderr)
                return 1
        wall = time.perf_counter() - wall
        for b in ([bar] if bar else []) + private_bars[-1:]:
            b.close()
        line = (f"gangway sim: {name}: shared cell {outcome.events:,} events in {outcome.wall_s:.1f} s "
                f"({outcome.events / outcome.wall_s:,.0f} events/s)")
        if outcome.private_events:
            line += (f"; private cells {outcome.private_events:,} events in {outcome.private_wall_s:.1f} s "
                     f"({outcome.private_events / outcome.private_wall_s:,.0f} events/s)")
        print(line + f"; {wall:.1f} s in all", file=sys.stderr)
        if "estimates" in result:
            print(report.estimates_line(result), file=sys.stderr)
        results.append(result)
    document = results[0] if args.mode == "run" else {"compare": results}
    if args.json:
        try:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(document, indent=1) + "\n")
        except OSError as error:
            print(f"gangway sim: cannot write {args.json}: {error.strerror or error}", file=sys.stderr)
            return 1
    print(report.table(results))
    if len(results[0]["trace"]["teams"]) > 1:
        print()
        print(report.team_table(results))
    if args.report:
        written = report.write(results, args.report)
        print(f"gangway sim: report in {', '.join(str(p) for p in written)}", file=sys.stderr)
    return 0
