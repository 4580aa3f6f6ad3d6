"""Test helpers for the control plane on a real broker: service processes, an operator that writes
events, and a reader of the whole cell log."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, TopicPartition

from events import models as m
from events.auth import SIGNING_KEY_ENV, WRITER_KEYS_ENV, admin_client, client_config, load_store, service_principal
from events.log import EventProducer
from events.reader import LogReader
from events.signing import Signer
from events.submission import job_submitted
from events.topics import TopicNames
from projections.cell import CellState
from projections.evolve import evolve

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ("admitter", "placer", "preemptor", "recovery")


def service_signer(service: str) -> Signer | None:
    """A service's own signing key (events/signing.py), from the principal store beside the writers' keys this
    process checks against; None when records are not signed."""
    keys = os.environ.get(WRITER_KEYS_ENV)
    entry = load_store(Path(keys).parent).get("principals", {}).get(service_principal(service), {}) if keys else {}
    return Signer(service, bytes.fromhex(entry["signing_key"])) if "signing_key" in entry else None


def own_signing_key(service: str) -> dict[str, str]:
    """The environment a service's process signs with its own key in; nothing when records are not signed."""
    key = service_signer(service)
    return {SIGNING_KEY_ENV: f"{service}:{key.seed.hex()}"} if key is not None else {}


class ControlPlane:
    """The four services as real processes, started and killed at will."""

    def __init__(self, bootstrap: str, state_dir: Path, cells: Sequence[str] = ("cell-a",),
                 policy: str | None = None) -> None:
        self.bootstrap, self.state_dir, self.cells, self.policy = bootstrap, state_dir, tuple(cells), policy
        self.processes: dict[str, subprocess.Popen] = {}

    def start(self, service: str, replica: str = "") -> None:
        """A service (or the intake, or the clock) as a process that signs what it writes with its own key."""
        policy = ["--policy", self.policy] if self.policy and service != "intake" else []
        self.command(service + replica, "run", service, "--state-dir", str(self.state_dir / (replica or "main")),
                     *policy, "-v", env=own_signing_key(service))

    def command(self, name: str, *args: str, env: dict[str, str] | None = None) -> None:
        """Any `gangway` command as a process on this broker and these cells, logging to <state_dir>/<name>.log."""
        log = open(self.state_dir / f"{name}.log", "ab")  # noqa: SIM115 - owned by the process
        self.processes[name] = subprocess.Popen(
            [sys.executable, "-m", "replay.cli", *args, "--bootstrap-servers", self.bootstrap,
             "--cells", ",".join(self.cells)],
            cwd=ROOT, env={**os.environ, **(env or {})}, stdout=log, stderr=subprocess.STDOUT)

    def tails(self, lines: int = 8) -> str:
        """The last lines each process logged, for an assertion's message."""
        out = []
        for name in sorted(self.processes):
            text = (self.state_dir / f"{name}.log").read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {name}\n" + "\n".join(text))
        return "\n".join(out)

    def start_all(self) -> None:
        """The four services and the intake (launchers and agents write input topics it takes in)."""
        for service in (*SERVICES, "intake"):
            self.start(service)

    def kill(self, name: str) -> None:
        """kill -9: no clean shutdown, an open transaction left behind."""
        self.processes[name].send_signal(signal.SIGKILL)
        self.processes[name].wait(30)

    def stop(self, name: str) -> int:
        """SIGTERM, as an operator stops a service: it saves its state and leaves its group."""
        self.processes[name].send_signal(signal.SIGTERM)
        return self.processes[name].wait(60)

    def stop_all(self) -> dict[str, int]:
        """SIGTERM to every process and their exit codes. One that does not stop within a minute is asked where
        it is stuck (SIGUSR1: its stacks go to its log), killed, and the test fails with that log's tail."""
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 60
        stuck = []
        for name, process in self.processes.items():
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                stuck.append(name)
                process.send_signal(signal.SIGUSR1)
                time.sleep(2)
                process.kill()
                process.wait(30)
        assert not stuck, f"{stuck} did not stop within 60 s of SIGTERM:\n{self.tails(60)}"
        return {name: process.returncode for name, process in self.processes.items()}


class Operator:
    """Writes events as launchers, node agents and operators would."""

    def __init__(self, bootstrap: str, topics: TopicNames, cells: Sequence[str] = ("cell-a",)) -> None:
        self.producer = EventProducer(bootstrap, f"operator-{uuid.uuid4().hex}", topics, cells)
        self.seq = 0
        self.last_at = 0

    def envelope(self, cell: str = "cell-a", producer: str = "operator") -> m.Envelope:
        """Stamped with the present, as a launcher does (a cell refuses a submission stamped long before its
        clock), and strictly after the last stamp, so the order written is the order stamped."""
        self.seq += 1
        self.last_at = max(self.last_at + 1, int(time.time() * 1000))
        return m.Envelope(event_id=f"{producer}-{uuid.uuid4().hex[:8]}-{self.seq}", cell=cell,
                          at=self.last_at, producer=producer)

    def write(self, *events: m.Event) -> None:
        with self.producer.transaction():
            for event in events:
                self.producer.produce(event)

    def cell(self, cell: str = "cell-a", nodes: int = 4, racks: int = 2, quota: int = 1000) -> None:
        e = lambda: self.envelope(cell)  # noqa: E731
        self.write(m.CellConfigured(envelope=e(), topology_levels=["rack"]),
                   *[m.NodeRegistered(envelope=e(), node=f"{cell}-n{i}", gpu_type="H100", gpus=8,
                                      labels={"rack": f"r{i % racks}"}) for i in range(nodes)],
                   m.TeamDefined(envelope=e(), team="nlp"),
                   m.QuotaSet(envelope=e(), team="nlp", gpu_type="H100", nominal=quota))

    def submit(self, job: str, workers: int = 1, gpus: int = 8, cell: str = "cell-a") -> m.JobSubmitted:
        envelope = self.envelope(cell, "launcher")
        event = job_submitted(job, "nlp", workers, gpus, "H100", cell=cell, at=envelope.at, producer="launcher",
                              event_id=envelope.event_id)
        self.write(event)
        return event


def read_log(bootstrap: str, topics: TopicNames, cell: str = "cell-a", cells: Sequence[str] = ("cell-a",),
             until: Callable[[list[m.Event]], bool] = lambda events: False,
             timeout: float = 60.0, or_fail: Callable[[], str] | None = None) -> list[tuple[int, m.Event]]:
    """The cell's committed log as (offset, event), read until `until(events)` holds or the timeout passes. With
    `or_fail` (say, a plane's `tails`), `until` must hold by then: else the test fails with what it returns."""
    logged: list[tuple[int, m.Event]] = []
    deadline = time.monotonic() + timeout
    with LogReader([cell], bootstrap, all_cells=cells, topics=topics) as reader:
        while time.monotonic() < deadline:
            logged += [(r.offset, r.event) for r in reader.poll(0.5) if r.event is not None]
            if until([e for _, e in logged]):
                return logged
    assert or_fail is None, f"not in the log within {timeout:.0f} s:\n{or_fail()}"
    return logged


def group_assignments(bootstrap: str, group: str) -> list[list[TopicPartition]]:
    """The partitions each member of a consumer group holds; none while the group's coordinator is still being
    found or is slow to answer (on a fresh broker, while the offsets topic is made)."""
    admin = admin_client(bootstrap)  # held while its answer comes
    try:
        described = admin.describe_consumer_groups([group])[group].result(timeout=10)
    except (KafkaException, TimeoutError):
        return []
    return [member.assignment.topic_partitions for member in described.members]


def wait_until_caught_up(bootstrap: str, topics: TopicNames, end: int, cell: str = "cell-a",
                         cells: Sequence[str] = ("cell-a",), services: Sequence[str] = SERVICES,
                         timeout: float = 60.0) -> None:
    """Waits until every service's consumer group has committed the cell's log up to `end` (exclusive). A group
    coordinator slow to answer (right after the brokers restarted, compose/KAFKA.md) is asked again."""
    partition = TopicPartition(topics.events, list(cells).index(cell))
    prefix = topics.events.removesuffix("gangway.events")
    deadline = time.monotonic() + timeout

    def committed(group: Consumer) -> int:
        try:
            return group.committed([partition], timeout=10)[0].offset
        except KafkaException:
            return -1  # not known yet

    for service in services:
        group = Consumer({**client_config(bootstrap), "group.id": f"{prefix}gangway-{service}"})
        try:
            while committed(group) < end:
                assert time.monotonic() < deadline, f"{service} did not read the log to offset {end}"
                time.sleep(0.2)
        finally:
            group.close()


def count(logged: list[tuple[int, m.Event]], kind: type, job: str | None = None) -> int:
    return sum(1 for _, e in logged if isinstance(e, kind) and (job is None or getattr(e, "job_id", None) == job))


def fold(logged: list[tuple[int, m.Event]]) -> CellState:
    """A rebuild of the cell's state from its log, as any projection would fold it."""
    state = CellState()
    for offset, event in logged:
        evolve(state, event, offset)
    return state
