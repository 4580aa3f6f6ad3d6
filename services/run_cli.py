"""`gangway run SERVICE`: runs one service (or the clock, or all of them as separate processes) on Kafka."""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from events.arguments import within
from events.auth import AuthError
from events.clock import VirtualClock, epoch_from_env, run_clock
from events.collector import long_lived_from_here
from events.command import needs_broker
from events.log import abandoned_calls
from events.topics import cells_from_env, topic_names, topic_prefix
from projections.store import StoreMismatch
from services.deciders import DECIDERS
from services.intake import REPLICA_NAME, Intake, IntakeNameTaken
from services.policies import UnknownPolicy, resolve
from services.shell import ServiceShell
from services.stop import StopRequest

EVERYTHING = (*DECIDERS, "clock", "intake")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("service", choices=(*EVERYTHING, "all"),
                        help="a service, the clock, the intake (takes the teams', nodes' and operators' input "
                             "topics into the cells' logs), or all of them (each its own process)")
    parser.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"))
    parser.add_argument("--cells", default=",".join(cells_from_env()),
                        help="comma-separated cells, in partition order (default: $GANGWAY_CELLS or cell-a)")
    parser.add_argument("--state-dir", type=Path, default=Path(os.environ.get("GANGWAY_STATE", "~/.gangway/state")),
                        help="where each service keeps its RocksDB projections (default ~/.gangway/state)")
    parser.add_argument("--policy", default="gangway",
                        help="the policy the services decide under: a name (gangway, fifo, static, kueue-like, "
                             "backfill) or a recorded version such as gangway-2+admission.backfill=false")
    parser.add_argument("--replica", default="",
                        help="intake: a name for one more intake (e.g. b); intakes share the input topics and one "
                             "takes over what a stopped one read (default: the unnamed intake)")
    parser.add_argument("--tick-interval", type=within(float, 0), default=1.0, help="clock: seconds between ticks")
    parser.add_argument("--speedup", type=within(float, 0), default=1.0, help="clock: event time runs this many times faster")
    parser.add_argument("--epoch", type=within(float, 0, low_included=True), default=epoch_from_env(),
                        help="clock: Unix seconds at which event time equals wall time (default $GANGWAY_EPOCH, else "
                             "now); give the fleet and load the same value when --speedup is not 1")
    parser.add_argument("-v", "--verbose", action="store_true")


def _run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(message)s")
    faulthandler.register(signal.SIGUSR1)  # `kill -USR1 <pid>` prints where every thread is, for a stuck service
    cells = tuple(c.strip() for c in args.cells.split(",") if c.strip())
    topics = topic_names()
    if args.replica and (args.service != "intake" or not REPLICA_NAME.fullmatch(args.replica)):
        print(f"gangway run {args.service}: --replica names an intake: 1-32 of a-z, 0-9 and '-' "
              f"(services share their cells through their consumer groups without one)", file=sys.stderr)
        return 1
    if args.service == "all":
        return _run_all(args)
    stop = StopRequest.listen()  # before anything starts: a stop while starting is a clean exit
    long_lived_from_here()
    try:
        if args.service == "clock":
            run_clock(args.bootstrap_servers, topics, cells, args.tick_interval,
                      VirtualClock.anchored(args.speedup, args.epoch))
            return 0
        if args.service == "intake":
            Intake(args.bootstrap_servers, topics, cells, name_prefix=topic_prefix(), replica=args.replica).run(stop=stop)
            return leave(0)
    except (AuthError, IntakeNameTaken) as error:
        print(f"gangway run {args.service}: {error}", file=sys.stderr)
        return 1
    try:
        shell = ServiceShell(DECIDERS[args.service](), args.bootstrap_servers, topics, cells,
                             args.state_dir.expanduser(), resolve(args.policy), name_prefix=topic_prefix())
        shell.run(stop=stop)
    except (UnknownPolicy, StoreMismatch, AuthError) as error:
        print(f"gangway run {args.service}: {error}", file=sys.stderr)
        return 1
    return leave(0)


def leave(code: int) -> int:
    """`code`, once a service has stopped in order; but when this process gave up on a librdkafka call, it ends here
    with `code`, its logs flushed, without the interpreter's finalization: that waited for ever in librdkafka once
    (the intake in the broker-fault test, 60 s after SIGTERM, its main thread garbage-collecting with no Python
    frame left, after it had given up on a send_offsets_to_transaction)."""
    if abandoned_calls():
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _run_all(args: argparse.Namespace) -> int:
    """One process per service and the clock; Ctrl-C (or SIGTERM) stops them all."""
    epoch = args.epoch if args.epoch is not None else time.time()  # one anchor for every child
    common = ["--epoch", repr(epoch), "--bootstrap-servers", args.bootstrap_servers, "--cells", args.cells,
              "--state-dir", str(args.state_dir), "--tick-interval", str(args.tick_interval),
              "--speedup", str(args.speedup), "--policy", args.policy] + (["-v"] if args.verbose else [])
    # Started from this checkout, whatever the caller's directory holds (`-m` looks there first).
    root = Path(__file__).resolve().parents[1]
    children = [subprocess.Popen([sys.executable, "-m", "replay.cli", "run", name, *common], cwd=root)
                for name in EVERYTHING]
    stop = lambda *_: [c.send_signal(signal.SIGTERM) for c in children if c.poll() is None]  # noqa: E731
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    codes = [c.wait() for c in children]
    return max(codes, default=0)


run = needs_broker("run", _run)
