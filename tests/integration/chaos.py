"""A chaos run of the whole control plane and what must hold after it, read from the committed log alone.

The four services, the clock, a simulated fleet and a trace load run as processes on a local broker; for a
while a random service (sometimes two) is killed with -9 every few seconds and started again, and on three
brokers the leader of the cell's partition is killed once and brought back. Then everything stops and the
whole log (and the heartbeat topic) is read back and checked:

- one admission and one placement per job attempt;
- no GPU bound to two jobs in any prefix of the fold;
- every service reproduces its decisions (verify), and its store is the log folded to its offset;
- no node failed for silence while it had heartbeats on the topic inside the silence;
- no job left running on a failed node.
"""

from __future__ import annotations

import random
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka.admin import AdminClient

from events import models as m
from events.auth import client_config
from events.broker import LocalKafka, quiet_logger
from events.reader import LogReader
from events.topics import TopicNames
from events.traces import trace_rows
from projections.cell import CellState
from projections.evolve import evolve
from projections.jobs import JobState
from projections.store import ProjectionStore
from replay.rebuild import differences
from replay.verify import verify
from services.deciders import DECIDERS
from tests.integration.control_plane import SERVICES, ControlPlane, fold, read_log, wait_until_caught_up
from tests.property.invariants import check_bindings

TRACE = Path(__file__).resolve().parents[3] / "shared" / "traces" / "microsoft-itp-2021" / "cluster05.csv"


@dataclass
class Chaos:
    """What to run and how hard to shake it."""

    seconds: float = 60.0  # how long services are killed
    speedup: float = 10.0  # event time runs this many times faster than the wall clock
    nodes: int = 24
    jobs: int = 400
    kill_every: tuple[float, float] = (10.0, 30.0)  # seconds between kills, uniform
    broker_kill: bool = False  # kill the leader of the cell's partition once (needs three brokers)
    seed: int = 0
    settle_s: float = 20.0  # after the last kill, before stopping


@dataclass
class Report:
    kills: Counter = field(default_factory=Counter)
    broker_kills: int = 0
    events: int = 0
    decisions: int = 0
    jobs: int = 0
    succeeded: int = 0
    node_failures: int = 0
    problems: list[str] = field(default_factory=list)


def run(kafka: LocalKafka | None, bootstrap: str, topics: TopicNames, state_dir: Path, chaos: Chaos) -> Report:
    """Runs the control plane under chaos on `bootstrap` (topics already created) and checks the log after."""
    rng = random.Random(chaos.seed)
    report = Report()
    plane = ControlPlane(bootstrap, state_dir)
    epoch = repr(time.time())
    speed = ["--speedup", str(chaos.speedup), "--epoch", epoch]
    try:
        plane.start_all()
        plane.command("clock", "run", "clock", "--tick-interval", "0.5", *speed)
        plane.command("fleet", "fleet", "--nodes", str(chaos.nodes), "--nodes-per-rack", "4", "--racks-per-block", "2",
                      "--checkpoint-every", "5m", "--checkpoint-delay", "20s", *speed)
        def registered(events: list[m.Event]) -> bool:
            """Every node registered: only then does the load define teams and submit (a gang bigger than the cell
            is rejected)."""
            return sum(isinstance(e, m.NodeRegistered) for e in events) >= chaos.nodes
        assert registered([e for _, e in read_log(bootstrap, topics, timeout=60, until=registered)]), plane.tails()
        plane.command("load", "load", f"--trace={TRACE}", "--limit", str(chaos.jobs), "--max-gpus",
                      str(min(64, chaos.nodes * 8)), "--compress", str(_compress(chaos)), "--define-teams", "--gpus",
                      str(chaos.nodes * 8), *speed)
        began = time.monotonic()
        broker_killed = not chaos.broker_kill
        first = rng.sample(SERVICES, len(SERVICES))  # every service is killed at least once, then any
        while time.monotonic() - began < chaos.seconds:
            time.sleep(rng.uniform(*chaos.kill_every))
            victims = [first.pop()] if first else rng.sample(SERVICES, 2 if rng.random() < 0.25 else 1)
            for victim in victims:
                plane.kill(victim)
                report.kills[victim] += 1
            if not broker_killed and time.monotonic() - began > chaos.seconds / 2:
                leader = AdminClient({**client_config(bootstrap), "logger": quiet_logger()}).list_topics(
                    topics.events, timeout=10).topics[topics.events].partitions[0].leader
                kafka.kill_node(leader)
                report.broker_kills += 1
                broker_killed = True
                time.sleep(3)
                kafka.start(timeout=150)
            time.sleep(rng.uniform(0.0, 3.0))
            for victim in victims:
                plane.start(victim)
        time.sleep(chaos.settle_s)
        logged = [(r.offset, r.event) for r in _read(bootstrap, topics, topics.events)]
        wait_until_caught_up(bootstrap, topics, logged[-1][0] + 1, timeout=120)
    finally:
        for name in ("load", "fleet", "clock"):
            process = plane.processes.get(name)
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
        plane.stop_all()
    logged = [(r.offset, r.event) for r in _read(bootstrap, topics, topics.events)]
    heartbeats = [r.event for r in _read(bootstrap, topics, topics.heartbeats)]
    check(logged, heartbeats, state_dir, report)
    return report


def _compress(chaos: Chaos) -> float:
    """How much faster than event time the trace plays so that its jobs arrive in the first 3/4 of the run."""
    rows = sorted(trace_rows(TRACE), key=lambda r: r.submit_s)[:chaos.jobs]
    span_s = rows[-1].submit_s - rows[0].submit_s
    return max(1.0, span_s / (chaos.speedup * chaos.seconds * 0.75))


def _read(bootstrap: str, topics: TopicNames, topic: str) -> list:
    with LogReader(["cell-a"], bootstrap, all_cells=["cell-a"], topics=topics, topic=topic) as reader:
        return [r for r in reader.read() if r.event is not None]


def check(logged: list[tuple[int, m.Event]], heartbeats: list[m.Event], state_dir: Path, report: Report) -> None:
    """Everything the run must satisfy, from the log; each failure is a line in `report.problems`."""
    problems = report.problems
    report.events = len(logged)
    report.decisions = sum(1 for _, e in logged if e.is_decision)
    ids = Counter(e.envelope.event_id for _, e in logged if e.is_decision)
    problems += [f"decision {i} written {n} times" for i, n in ids.items() if n > 1]
    state = CellState()
    admitted: Counter = Counter()
    placed: Counter = Counter()
    for n, (offset, event) in enumerate(logged):
        attempt = state.jobs[event.job_id].attempt if getattr(event, "job_id", None) in state.jobs else None
        evolve(state, event, offset)
        job = state.jobs.get(getattr(event, "job_id", ""))
        took = job is not None and job.reason_offset == offset
        if isinstance(event, m.JobAdmitted) and took:
            admitted[(event.job_id, attempt)] += 1
        if isinstance(event, m.JobPlaced) and took:
            placed[(event.job_id, event.attempt)] += 1
        if n % 50 == 0 or isinstance(event, (m.JobPlaced, m.JobAdmitted)):
            try:
                check_bindings(state)
            except AssertionError as error:
                problems.append(f"at offset {offset}: {error}")
                break
    problems += [f"{job} attempt {a} admitted {n} times" for (job, a), n in admitted.items() if n > 1]
    problems += [f"{job} attempt {a} placed {n} times" for (job, a), n in placed.items() if n > 1]
    report.jobs = len(state.jobs) + len(state.retired)
    report.succeeded = sum(1 for _, e in logged if isinstance(e, m.JobSucceeded))
    for name, decider in sorted(DECIDERS.items()):
        stored = ProjectionStore(state_dir / "main" / name / "cell-a").load()
        if stored is None:
            problems.append(f"{name} has no store")
            continue
        verdict = verify(logged, decider(), upto=stored.offset)
        if not verdict.ok:
            problems.append(f"verify {name}: missing {verdict.missing[:3]}, different {verdict.different[:3]}, "
                            f"extra {verdict.extra[:3]}")
        diff = differences(stored, fold([(o, e) for o, e in logged if o <= stored.offset]))
        if diff:
            problems.append(f"{name}'s store differs from the log folded to offset {stored.offset}: {diff[:5]}")
    beats: dict[str, list[int]] = {}
    for beat in heartbeats:
        beats.setdefault(beat.node, []).append(beat.envelope.at)
    for _, event in logged:
        if isinstance(event, m.NodeFailed) and event.envelope.reason is m.Reason.HEARTBEAT_MISSED:
            report.node_failures += 1
            last, at = event.last_heartbeat_at or 0, event.envelope.at
            inside = [t for t in beats.get(event.node, []) if last < t <= at - 5_000]
            if inside:
                problems.append(f"{event.node} failed at {at} for silence since {last}, yet it heartbeat at {inside[0]}")
    for node in state.cluster.nodes.values():
        if node.failed:
            stuck = [j for j in node.jobs() if state.jobs[j].state in (JobState.PLACED, JobState.RUNNING)]
            if stuck:
                problems.append(f"{node.name} failed but {stuck} still run on it")
