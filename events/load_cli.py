"""`gangway load`: plays job traces onto the log, each submission written when the virtual clock reaches it."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

from events import models as m
from events.arguments import count, positive_int, within
from events.clock import VirtualClock, epoch_from_env
from events.command import needs_broker
from events.load import PRODUCER, Slice, select, submissions, team_events
from events.log import InputWriter
from events.reader import LogReader, await_on_log
from events.topics import cells_from_env, topic_names, topic_prefix
from events.traces import trace_rows

BATCH = 500  # submissions per transaction at most


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trace", type=Path, action="append", required=True, metavar="PATH",
                        help="an ITP or Philly CSV, or a folder of cluster*.csv (repeatable); one team per file")
    parser.add_argument("--speedup", type=within(float, 0), default=1.0, help="event time runs this many times faster (as the clock's)")
    parser.add_argument("--epoch", type=within(float, 0, low_included=True), default=epoch_from_env(),
                        help="Unix seconds at which event time equals wall time: the clock's (default $GANGWAY_EPOCH, else now)")
    parser.add_argument("--compress", type=within(float, 0), default=1.0, metavar="K",
                        help="play the slice K times faster than event time: gaps and durations divided by K")
    parser.add_argument("--limit", type=positive_int, default=None, metavar="N", help="at most N jobs")
    parser.add_argument("--start", type=count, default=None, metavar="S", help="start S seconds into the trace")
    parser.add_argument("--max-gpus", type=positive_int, default=None, metavar="G", help="leave out jobs of more than G GPUs")
    parser.add_argument("--cells", default=",".join(cells_from_env()),
                        help="comma-separated cells in partition order; teams are spread over them")
    parser.add_argument("--gpu-type", default="H100")
    parser.add_argument("--gpus-per-node", type=positive_int, default=8, help="for the gang shape: bigger jobs use whole nodes")
    parser.add_argument("--define-teams", action="store_true",
                        help="first define a cohort, the teams and their quotas (needs --gpus)")
    parser.add_argument("--gpus", type=positive_int, default=None, help="GPUs per cell shared out as nominal quotas by GPU-hours")
    parser.add_argument("--cohort", default="trace", help="the cohort the teams lend and borrow in")
    parser.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"))


def _run(args: argparse.Namespace) -> int:
    if args.define_teams and args.gpus is None:
        print("gangway load: --define-teams needs --gpus (the GPUs of each cell)", file=sys.stderr)
        return 2
    cells = tuple(c.strip() for c in args.cells.split(",") if c.strip())
    try:
        rows = sorted((r for path in args.trace for r in trace_rows(path)), key=lambda r: (r.submit_s, r.cluster, r.row))
    except (OSError, ValueError) as error:
        print(f"gangway load: {error}", file=sys.stderr)
        return 2
    chosen, too_large = select(rows, Slice(args.start, args.limit, args.max_gpus))
    clock = VirtualClock.anchored(args.speedup, args.epoch)
    try:
        written = already_written(args.bootstrap_servers, cells)
    except ValueError as error:
        print(f"gangway load: {error}", file=sys.stderr)
        return 2
    origin = clock.now_ms()
    jobs = submissions(chosen, cells, origin, args.start, args.gpu_type, args.gpus_per_node, args.compress)
    resumed = [j for j in jobs if j.envelope.event_id in written]
    if resumed:  # a re-run after a crash: the same schedule, from the first run's origin, without duplicates
        origin += written[resumed[0].envelope.event_id] - resumed[0].at
        jobs = submissions(chosen, cells, origin, args.start, args.gpu_type, args.gpus_per_node, args.compress)
        print(f"gangway load: {len(resumed)} of these jobs are on the log already: resuming after them", flush=True)
    events: list[m.Event] = team_events(chosen, cells, args.gpus, args.gpu_type, args.cohort, origin) \
        if args.define_teams else []
    events = [e for e in events if e.envelope.event_id not in written]
    jobs = [j for j in jobs if j.envelope.event_id not in written]
    span_s = (jobs[-1].at - origin) / 1000 if jobs else 0
    print(f"gangway load: {len(jobs)} jobs of {len({j.team for j in jobs})} teams over {span_s:.0f} s of trace time "
          f"({span_s / args.speedup:.1f} s at speedup {args.speedup:g})"
          + (f"; left out {too_large} jobs of more than {args.max_gpus} GPUs" if too_large else ""), flush=True)
    # Each team's jobs go to its input topic as its principal, definitions to the operators' (events/auth.py).
    producer = InputWriter(args.bootstrap_servers, topic_names(), cells, topic_prefix())
    if events:
        # Definitions (the operators' input) and jobs (the teams') reach the log through different input topics:
        # the teams must be on the log before their first job is.
        producer.write(events)
        missing = await_on_log([e.envelope.event_id for e in events], cells, args.bootstrap_servers, cells)
        if missing:
            print(f"gangway load: {len(missing)} team definitions are not on the log after 30 s: is the intake "
                  f"running (`gangway run intake`)?", file=sys.stderr)
            return 1
    written = len(events) + play(producer, list(jobs), clock)
    print(f"gangway load: wrote {written} events", flush=True)
    return 0 if written == len(events) + len(jobs) else 1


def already_written(bootstrap: str, cells: tuple[str, ...]) -> dict[str, int]:
    """Event id -> time of what the loader wrote to these cells' logs before (a run that crashed)."""
    with LogReader(cells, bootstrap, all_cells=cells) as reader:
        return {r.event.envelope.event_id: r.event.envelope.at for r in reader.read()
                if r.event is not None and r.event.envelope.producer == PRODUCER}


def play(producer: InputWriter, events: list[m.Event], clock: VirtualClock) -> int:
    """Writes each event once the clock reaches its time (in time order); returns how many, until SIGTERM / SIGINT."""
    stopping: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(True))
    pending = sorted(events, key=lambda e: e.at)  # stable: definitions stay ahead of jobs at the same time
    done = 0
    while done < len(pending) and not stopping:
        now = clock.now_ms()
        due = done
        while due < len(pending) and due - done < BATCH and pending[due].at <= now:
            due += 1
        if due == done:
            time.sleep(min(0.1, (pending[done].at - now) / 1000 / clock.speedup))
            continue
        producer.write(pending[done:due])
        done = due
    producer.flush()
    return done


run = needs_broker("load", _run)
