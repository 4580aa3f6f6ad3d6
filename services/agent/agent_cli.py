"""`gangway agent`: one real node agent (services/agent/real.py) on Kafka: reads the cell's log, runs the
node's workers as processes, and writes what it sees (registration, heartbeats, starts, exits, checkpoints)."""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import signal
import socket
import sys
import time
from pathlib import Path

from confluent_kafka import KafkaException

from events import models as m
from events.arguments import positive_int, within
from events.auth import AuthError, agent_principal
from events.clock import VirtualClock, epoch_from_env, speedup_from_env
from events.command import guarded, needs_broker
from events.durations import parse_duration
from events.launcher.spec import valid_name
from events.log import EventProducer, ProducerFenced
from events.reader import LogReader
from events.topics import cells_from_env, topic_names, topic_prefix
from events.tracing import Tracer
from services.agent.fleet import trace_placement
from services.agent.real import AgentConfig, NodeAgent

log = logging.getLogger("gangway.agent")
POLL_S = 0.05  # longest wait for the log between rounds: how soon a placement is acted on
#: How long one write waits out the brokers before the agent goes back to its workers (and tries again next round).
WRITE_GIVE_UP_S = 10.0
EXAMPLE = "gangway agent --node gpu-1 --gpus 8 --gpu-type H100 --rack r1 --block b1 --work-dir /var/lib/gangway"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--node", required=True, help="the node's name (one agent per node)")
    parser.add_argument("--gpus", type=positive_int, required=True, help="GPUs on the node (CUDA indices 0..N-1)")
    parser.add_argument("--gpu-type", required=True, help="e.g. H100")
    parser.add_argument("--rack", required=True)
    parser.add_argument("--block", required=True)
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="workers' directories and logs (default ~/.gangway/agents/NODE)")
    parser.add_argument("--address", default="127.0.0.1",
                        help="where other nodes reach this one (MASTER_ADDR of gangs whose rank 0 runs here)")
    parser.add_argument("--checkpoint-signal", default="USR1",
                        help="the signal that asks a preempted job to checkpoint (default USR1)")
    parser.add_argument("--stop-grace", type=parse_duration, default=10_000, metavar="DURATION",
                        help="wall time from SIGTERM to SIGKILL when stopping workers (default 10s)")
    parser.add_argument("--heartbeat-every", type=parse_duration, default=5_000, metavar="DURATION",
                        help="event time between heartbeats (default 5s: recovery fails a node after 30s of silence)")
    parser.add_argument("--drain-on-exit", action="store_true",
                        help="on SIGTERM / Ctrl-C stop the workers first (default: they keep running and a "
                             "restarted agent adopts them)")
    parser.add_argument("--cells", default=",".join(cells_from_env()),
                        help="comma-separated cells in partition order (default: $GANGWAY_CELLS or cell-a)")
    parser.add_argument("--cell", default=None, help="the node's cell (default: the first of --cells)")
    parser.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"))
    parser.add_argument("--speedup", type=within(float, 0), default=speedup_from_env(),
                        help="event time runs this many times faster, as the clock's (default $GANGWAY_SPEEDUP or 1)")
    parser.add_argument("--epoch", type=within(float, 0, low_included=True), default=epoch_from_env(),
                        help="Unix seconds at which event time equals wall time (default $GANGWAY_EPOCH, else now)")
    parser.add_argument("-v", "--verbose", action="store_true")


def _run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(message)s")
    cells = tuple(c.strip() for c in args.cells.split(",") if c.strip())
    cell = args.cell or cells[0]
    problem = _usage_problem(args, cells, cell)
    if problem:
        print(f"gangway agent: {problem}", file=sys.stderr)
        return 2
    work_dir = (args.work_dir or Path(f"~/.gangway/agents/{args.node}")).expanduser().resolve()
    work_dir.mkdir(parents=True, exist_ok=True)
    config = AgentConfig(args.node, args.gpus, args.gpu_type, args.rack, args.block, work_dir, args.address,
                         signal.Signals[f"SIG{args.checkpoint_signal.upper().removeprefix('SIG')}"],
                         args.stop_grace / 1000, args.heartbeat_every / 1000 / args.speedup)
    clock = VirtualClock.anchored(args.speedup, args.epoch)
    return guarded("agent", lambda _: run_agent(NodeAgent(config, cell), args.bootstrap_servers, cells, clock, args.drain_on_exit) or 0, AuthError, KafkaException, ProducerFenced)(args)


def _usage_problem(args: argparse.Namespace, cells: tuple[str, ...], cell: str) -> str | None:
    if cell not in cells:
        return f"unknown cell {cell!r}; cells: {', '.join(cells)}"
    for name in ("node", "gpu_type", "rack", "block"):
        if not valid_name(getattr(args, name)):
            return f"--{name.replace('_', '-')} {getattr(args, name)!r}: use letters, digits, '.', '_' and '-'"
    if args.gpus < 1:
        return "--gpus must be at least 1"
    if f"SIG{args.checkpoint_signal.upper().removeprefix('SIG')}" not in signal.Signals.__members__:
        return f"--checkpoint-signal {args.checkpoint_signal!r} is not a signal (e.g. USR1, USR2, INT)"
    try:
        socket.getaddrinfo(args.address, None)
    except OSError:
        return f"--address {args.address!r} does not resolve"
    return None


def run_agent(agent: NodeAgent, bootstrap: str, cells: tuple[str, ...], clock: VirtualClock,
              drain_on_exit: bool = False) -> None:
    """Catch up with the log (folding, not reacting), register and adopt, then react until SIGTERM / SIGINT."""
    stopping: list[bool] = []
    faulthandler.register(signal.SIGUSR1)  # `kill -USR1 <pid>` prints where every thread is, for a stuck agent
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(True))
    topics = topic_names()
    # One transactional id per node: a restarted agent fences the old one and aborts what it left open.
    # Its node's facts go to its node's input topic, as the node's principal (events/auth.py).
    principal = agent_principal(agent.node)
    producer = EventProducer(bootstrap, f"{topic_prefix()}gangway-agent-{agent.node}", topics, cells,
                             principal=principal, inputs=lambda _: topics.node_input(agent.node))
    reader = LogReader([agent.cell], bootstrap, all_cells=cells, topics=topics, principal=principal)
    tracer = Tracer(f"agent-{agent.node}")
    try:
        for record in reader.read():
            if record.event is not None:
                agent.observe(record.offset, record.event, clock.now_ms(), live=False)
        agent.start(clock.now_ms())
        log.info("agent of %s is up (%d GPUs %s)", agent.node, agent.config.gpus, agent.config.gpu_type)
        draining_since = None
        while True:
            if stopping and draining_since is None:
                if not drain_on_exit:
                    break
                draining_since = time.monotonic()
                agent.stop_all()
            if draining_since is not None and not agent.live_workers():
                break
            for record in reader.follow(POLL_S):
                if record.event is not None:
                    agent.observe(record.offset, record.event, clock.now_ms())
                    trace_placement(tracer, record, {agent.node})
            if draining_since is None:
                agent.step(clock.now_ms())
            else:
                agent.collect(clock.now_ms())
            _write(producer, agent)
        if not _write(producer, agent):
            log.error("agent of %s stops with %d event(s) the brokers did not take", agent.node, len(agent.outbox))
    finally:
        reader.close()
        producer.flush()
        tracer.shutdown()


def write_drained(producer: EventProducer, events: list[tuple[m.Event, bool]],
                  give_up_after_s: float) -> KafkaException | None:
    """Writes what an agent (or the simulated fleet) drained, in one transaction: facts and heartbeats in the order
    made. Returns the error when the brokers did not take them in time, for the caller to keep them for its next
    write; being fenced by another writer of the id (ProducerFenced) is raised."""
    try:
        producer.write([e for e, heartbeat in events if not heartbeat], [e for e, heartbeat in events if heartbeat],
                       give_up_after_s=give_up_after_s)
    except KafkaException as error:
        return error
    return None


def _write(producer: EventProducer, agent: NodeAgent, give_up_after_s: float = WRITE_GIVE_UP_S) -> bool:
    """What the agent saw since the last write, in one transaction, seen through a broker's failover
    (EventProducer.write). When the brokers do not take it in time, the events go back to the agent, to be written
    with the next ones: a worker's exit or checkpoint is never dropped, and the agent keeps watching its workers
    meanwhile. Another agent of the same node fencing this one (ProducerFenced) ends it. False: not written."""
    events = agent.drain()
    if not events:
        return True
    error = write_drained(producer, events, give_up_after_s)
    if error is not None:
        log.warning("agent of %s could not write %d event(s) (%s); keeping them for the next write", agent.node,
                    len(events), error)
        agent.put_back(events)
        return False
    return True


run = needs_broker("agent", _run)
