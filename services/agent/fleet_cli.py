"""`gangway fleet`: the simulated fleet (services/agent/fleet.py) on Kafka, one process for every node of the given cells."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys

from confluent_kafka import KafkaException

from events import models as m
from events.arguments import non_negative, positive_int, within
from events.auth import FLEET, AuthError
from events.clock import VirtualClock, epoch_from_env
from events.command import guarded, needs_broker
from events.durations import parse_duration
from events.log import EventProducer, ProducerFenced
from events.reader import LogReader
from events.topics import TopicNames, cells_from_env, topic_names, topic_prefix
from events.tracing import Tracer
from services.agent.agent_cli import write_drained
from services.agent.failures import FIRST_BUSY, FailureSpec
from services.agent.fleet import Fleet, FleetSpec, trace_placement
from services.agent.simulated import AgentTiming

log = logging.getLogger("gangway.fleet")
MAX_WAIT_S = 0.1  # longest poll: timers are checked at least this often
#: How long one cell's write waits out the brokers before the fleet goes back to its timers (and tries again).
WRITE_GIVE_UP_S = 10.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=within(int, 1, low_included=True), required=True, help="nodes per cell")
    parser.add_argument("--gpus-per-node", type=positive_int, default=8)
    parser.add_argument("--nodes-per-rack", type=positive_int, default=4)
    parser.add_argument("--racks-per-block", type=positive_int, default=None, help="default: one block of every rack")
    parser.add_argument("--gpu-type", default="H100")
    parser.add_argument("--cells", default=",".join(cells_from_env()),
                        help="comma-separated cells in partition order; each gets --nodes nodes")
    parser.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"))
    parser.add_argument("--speedup", type=within(float, 0), default=1.0, help="event time runs this many times faster (as the clock's)")
    parser.add_argument("--epoch", type=within(float, 0, low_included=True), default=epoch_from_env(),
                        help="Unix seconds at which event time equals wall time: the clock's (default $GANGWAY_EPOCH, else now)")
    parser.add_argument("--heartbeat-every", type=parse_duration, default=5_000, metavar="DURATION")
    parser.add_argument("--start-delay", type=parse_duration, default=1_000, metavar="DURATION",
                        help="from placement to the workers running")
    parser.add_argument("--checkpoint-every", type=parse_duration, default=10 * 60_000, metavar="DURATION")
    parser.add_argument("--checkpoint-delay", type=parse_duration, default=30_000, metavar="DURATION",
                        help="time to write a checkpoint when preemption asks for one")
    parser.add_argument("--node-failure-rate", type=non_negative, default=0.0, metavar="F", help="node losses per node-hour")
    parser.add_argument("--xid-rate", type=non_negative, default=0.0, metavar="F", help="Xid errors (79, 48, 13) per node-hour")
    parser.add_argument("--repair-time", type=parse_duration, default=10 * 60_000, metavar="DURATION",
                        help="a lost or cordoned node passes its health checks this long after failing")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fail-node", default=None, metavar="NAME",
                        help=f"test hook: lose this node ('{FIRST_BUSY}': the first one a worker starts on) ...")
    parser.add_argument("--fail-at", type=non_negative, default=0.0, metavar="SECONDS",
                        help="... this many event seconds after its first worker starts")
    parser.add_argument("-v", "--verbose", action="store_true")


def _run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(message)s")
    cells = tuple(c.strip() for c in args.cells.split(",") if c.strip())
    spec = FleetSpec(args.nodes, args.gpus_per_node, args.nodes_per_rack, args.racks_per_block, args.gpu_type)
    timing = AgentTiming(start_delay_ms=args.start_delay, checkpoint_every_ms=args.checkpoint_every or None,
                         checkpoint_delay_ms=args.checkpoint_delay, heartbeat_every_ms=args.heartbeat_every)
    failures = FailureSpec(args.node_failure_rate, args.xid_rate, args.seed, args.repair_time,
                           args.fail_node, int(args.fail_at * 1000))
    fleet = Fleet(cells, spec, timing, failures)
    if args.fail_node and args.fail_node != FIRST_BUSY and args.fail_node not in fleet.node_cell:
        print(f"gangway fleet: no node {args.fail_node!r} (nodes look like {next(iter(fleet.node_cell))})",
              file=sys.stderr)
        return 2
    clock = VirtualClock.anchored(args.speedup, args.epoch)
    return guarded("fleet", lambda _: run_fleet(fleet, args.bootstrap_servers, topic_names(), cells, clock, topic_prefix()) or 0, AuthError, KafkaException, ProducerFenced)(args)


def run_fleet(fleet: Fleet, bootstrap: str, topics: TopicNames, cells: tuple[str, ...], clock: VirtualClock,
              name_prefix: str = "") -> None:
    """Runs the fleet until SIGTERM / SIGINT: read the main log, fire due timers, write what they produced."""
    # On start: fold the log as it stands without reacting (history), carry on the runs already placed on
    # our nodes, register the nodes the log does not know. Then the loop: poll briefly (the next timer's
    # wall time at most), react, fire, and write one small transaction per cell.
    stopping: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(True))
    # One transactional id per cell, so a restarted fleet fences the old one and aborts what it left open.
    # Its nodes' facts go to their input topics, as the fleet's principal, which may write every node's.
    # A fact about no node or job (the cell's first configuration) goes to the input of the cell's first node.
    first = {}
    for node, cell in sorted(fleet.node_cell.items()):
        first.setdefault(cell, node)

    def route(event: m.Event) -> str:
        """A node's facts to its node's input; a checkpoint to the input of a node its job runs on."""
        node = m.field_of(event, "node")
        job_id = m.field_of(event, "job_id")
        if node is None and job_id is not None:
            job = fleet.cells[event.envelope.cell].state.jobs.get(job_id)
            node = job.assignments[0][1] if job is not None and job.assignments else None
        return topics.node_input(node or first[event.envelope.cell])

    producers = {cell: EventProducer(bootstrap, f"{name_prefix}gangway-fleet-{cell}", topics, cells,
                                     principal=FLEET, inputs=route)
                 for cell in fleet.cells}
    # Every node's input at once: made one by one, each new topic would cost the intake a rebalance, and the
    # heartbeats of the nodes already taken in would stall behind them long enough to look like silence.
    for cell, producer in producers.items():
        producer.make_inputs([topics.node_input(node) for node, c in sorted(fleet.node_cell.items()) if c == cell])
    # Every start folds the cells' logs from the beginning, as a fresh projection would.
    reader = LogReader(fleet.cells, bootstrap, all_cells=cells, topics=topics, principal=FLEET)
    tracer = Tracer("fleet")
    nodes = set(fleet.node_cell)
    try:
        for record in reader.read():  # history: folded without reacting
            if record.event is not None:
                fleet.observe(reader.cell_of(record), record.event, record.offset, live=False)
        fleet.adopt(clock.now_ms())
        fleet.register(clock.now_ms())
        log.info("fleet of %d nodes in %s is up", len(fleet.node_cell), ", ".join(fleet.cells))
        while not stopping:
            for record in reader.follow(_wait_s(fleet, clock), 500):
                if record.event is not None:
                    fleet.observe(reader.cell_of(record), record.event, record.offset)
                    trace_placement(tracer, record, nodes)
            fleet.fire(clock.now_ms())
            _write(fleet, producers)
        _write(fleet, producers)
    finally:
        reader.close()
        for producer in producers.values():
            producer.flush()
        tracer.shutdown()


def _wait_s(fleet: Fleet, clock: VirtualClock) -> float:
    """Wall seconds until the next timer is due, at most MAX_WAIT_S."""
    due = fleet.timers.next_due()
    if due is None:
        return MAX_WAIT_S
    return max(0.0, min(MAX_WAIT_S, (due - clock.now_ms()) / 1000 / clock.speedup))


def _write(fleet: Fleet, producers: dict[str, EventProducer], give_up_after_s: float = WRITE_GIVE_UP_S) -> None:
    """One transaction per cell for what the timers produced since the last write, seen through a broker's failover
    (EventProducer.write). What the brokers do not take in time goes back to the fleet and is written with the
    cell's next events, as the real agent does (services/agent/agent_cli.py); being fenced ends the fleet."""
    for cell, events in fleet.drain().items():
        error = write_drained(producers[cell], events, give_up_after_s)
        if error is not None:
            log.warning("fleet could not write %d event(s) of %s (%s); keeping them for the next write", len(events),
                        cell, error)
            fleet.put_back(cell, events)


run = needs_broker("fleet", _run)
