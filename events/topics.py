"""Gangway's topic catalogue as data, and its idempotent creation: every component finds its topics and cell partitions here."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

EVENTS = "gangway.events"
HEARTBEATS = "gangway.heartbeats"
DEADLETTER = "gangway.deadletter"
#: Input topics: one per team (requests), one for operators, one per node (agent facts and heartbeats). Only the
#: principal that owns one may write it (events/auth.py); the intake takes them into the cells' logs.
INPUTS = "gangway.in."
DEFAULT_CELLS = ("cell-a",)

HOUR_MS = 60 * 60 * 1000
DAY_MS = 24 * HOUR_MS
_CELL_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


class TopicError(RuntimeError):
    """The cluster's topics cannot serve the catalogue (too few partitions, creation refused); one-line message."""


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    replication_factor: int
    config: Mapping[str, str] = field(default_factory=dict)
    purpose: str = ""


@dataclass(frozen=True)
class TopicNames:
    events: str
    heartbeats: str
    deadletter: str

    @property
    def inputs(self) -> str:
        """The prefix of every input topic (topic prefix included)."""
        return self.events.removesuffix(EVENTS) + INPUTS

    def team_input(self, team: str) -> str:
        return f"{self.inputs}team.{team}"

    def node_input(self, node: str) -> str:
        return f"{self.inputs}node.{node}"

    @property
    def operator_input(self) -> str:
        return f"{self.inputs}operator"

    def source_of(self, topic: str) -> tuple[str, str] | None:
        """("team", T), ("node", N) or ("operator", "") for an input topic; None for any other topic."""
        if not topic.startswith(self.inputs):
            return None
        rest = topic[len(self.inputs):]
        if rest == "operator":
            return "operator", ""
        kind, _, name = rest.partition(".")
        return (kind, name) if kind in ("team", "node") and name else None

    def input_topic(self, event) -> str:
        """Where an event from outside the control plane is written: its team's, its node's or the operators'
        input topic. Decisions and Ticks are the services' and go to the main log."""
        from events import models as m

        if isinstance(event, (m.JobSubmitted, m.JobCancelRequested)) and event.team:
            return self.team_input(event.team)
        node = m.field_of(event, "node")
        if node is not None and not isinstance(event, (m.NodeCordoned, m.NodeUncordoned)):
            return self.node_input(node)
        return self.operator_input


def topic_prefix(env: Mapping[str, str] = os.environ) -> str:
    """`GANGWAY_TOPIC_PREFIX` is prepended verbatim to every topic name, so tests (or tenants) can isolate themselves."""
    return env.get("GANGWAY_TOPIC_PREFIX", "")


def topic_names(prefix: str | None = None) -> TopicNames:
    p = topic_prefix() if prefix is None else prefix
    return TopicNames(events=p + EVENTS, heartbeats=p + HEARTBEATS, deadletter=p + DEADLETTER)


def cells_from_env(env: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    """The ordered cell list from `GANGWAY_CELLS` (comma-separated; default `cell-a`). Order is the partition mapping."""
    raw = env.get("GANGWAY_CELLS", "")
    return validate_cells([c.strip() for c in raw.split(",") if c.strip()] if raw.strip() else DEFAULT_CELLS)


def validate_cells(cells: Sequence[str]) -> tuple[str, ...]:
    if not cells:
        raise TopicError("no cells: GANGWAY_CELLS must name at least one cell")
    bad = [c for c in cells if not _CELL_NAME.match(c)]
    if bad:
        raise TopicError(f"invalid cell names {bad}: use letters, digits, '.', '_' and '-'")
    dupes = sorted({c for c in cells if list(cells).count(c) > 1})
    if dupes:
        raise TopicError(f"cells listed twice: {dupes}")
    return tuple(cells)


def cell_partition(cells: Sequence[str], cell: str) -> int:
    """Cell i is partition i of the main and heartbeat topics: explicit, never a key hash, so adding a cell moves none."""
    try:
        return list(cells).index(cell)
    except ValueError:
        raise TopicError(f"unknown cell {cell!r}: known cells are {list(cells)}") from None


def catalogue(cells: Sequence[str], replication_factor: int, prefix: str | None = None) -> tuple[TopicSpec, ...]:
    """Every topic Gangway uses, with the configs it must be created with."""
    cells = validate_cells(cells)
    names = topic_names(prefix)
    rf = replication_factor
    durable_isr = str(min(2, rf))
    return (
        TopicSpec(names.events, len(cells), rf, {
            "retention.ms": "-1",  # the log is the source of truth: keep every event forever
            "cleanup.policy": "delete",
            "min.insync.replicas": durable_isr,
            "unclean.leader.election.enable": "false",
        }, "every state change and decision; partition i = cell i"),
        TopicSpec(names.heartbeats, len(cells), rf, {
            "retention.ms": str(HOUR_MS),
            "cleanup.policy": "delete",
            # Retention only drops whole closed segments: roll every 10 min so an hour really is about an hour.
            "segment.ms": str(10 * 60 * 1000),
            "min.insync.replicas": "1",  # telemetry: availability over durability, a lost beat is re-sent
        }, "node heartbeats (high rate, short-lived); partition i = cell i"),
        TopicSpec(names.deadletter, 1, rf, {
            "retention.ms": str(30 * DAY_MS),
            "cleanup.policy": "delete",
            "min.insync.replicas": durable_isr,
        }, "undecodable records with the reason, for operators"),
    )


def ensure_topics(admin: AdminClient, cells: Sequence[str], replication_factor: int,
                  prefix: str | None = None, timeout: float = 30.0) -> tuple[TopicSpec, ...]:
    """Create missing catalogue topics with explicit configs; check existing ones have enough partitions. Idempotent."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    specs = catalogue(cells, replication_factor, prefix)
    existing = admin.list_topics(timeout=timeout).topics
    missing = [s for s in specs if s.name not in existing]
    if missing:
        futures = admin.create_topics(
            [NewTopic(s.name, num_partitions=s.partitions, replication_factor=s.replication_factor, config=dict(s.config))
             for s in missing],
            request_timeout=timeout,
        )
        for name, future in futures.items():
            try:
                future.result(timeout=timeout)
            except KafkaException as exc:
                error = exc.args[0]
                if error.code() != KafkaError.TOPIC_ALREADY_EXISTS:  # a concurrent creator won the race: fine
                    raise TopicError(f"creating topic {name} failed: {error.str()}") from None
    _wait_for_leaders(admin, specs, cells, timeout)
    return specs


def _wait_for_leaders(admin: AdminClient, specs: Sequence[TopicSpec], cells: Sequence[str], timeout: float) -> None:
    """Verify partition counts, and wait until every partition has a leader so the first produce does not bounce."""
    deadline = time.monotonic() + timeout
    while True:
        topics = admin.list_topics(timeout=timeout).topics
        waiting = False
        for spec in specs:
            meta = topics.get(spec.name)
            if meta is None or meta.error is not None:
                waiting = True
                continue
            if len(meta.partitions) < spec.partitions:
                raise TopicError(
                    f"topic {spec.name} has {len(meta.partitions)} partitions but needs {spec.partitions} "
                    f"(cells {list(cells)}): add partitions with AdminClient.create_partitions; cell i stays partition i")
            waiting = waiting or any(p.leader < 0 for p in meta.partitions.values())
        if not waiting:
            return
        if time.monotonic() > deadline:
            raise TopicError(f"topics {[s.name for s in specs]} have no leader after {timeout:.0f} s")
        time.sleep(0.2)


@dataclass(frozen=True)
class TopicState:
    """What the cluster actually holds for a catalogue topic."""

    name: str
    partitions: int
    replication_factor: int
    config: Mapping[str, str]


def describe_topics(admin: AdminClient, specs: Sequence[TopicSpec], timeout: float = 30.0) -> tuple[TopicState, ...]:
    """The live partitions, replication factor and values of each spec's configs (for printing and tests)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import ConfigResource, ResourceType

    resources = [ConfigResource(ResourceType.TOPIC, s.name) for s in specs]
    deadline = time.monotonic() + timeout
    while True:
        # Just after creation, the broker asked may not have the topics' metadata yet (seen on 3 nodes).
        topics = admin.list_topics(timeout=timeout).topics
        try:
            configs = {res.name: future.result(timeout=timeout)
                       for res, future in admin.describe_configs(resources, request_timeout=timeout).items()}
            if all(s.name in topics for s in specs) or time.monotonic() > deadline:
                break
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART or time.monotonic() > deadline:
                raise
        time.sleep(0.2)
    states = []
    for spec in specs:
        partitions = topics[spec.name].partitions
        rf = min((len(p.replicas) for p in partitions.values()), default=0)
        values = {key: configs[spec.name][key].value for key in spec.config}
        states.append(TopicState(spec.name, len(partitions), rf, values))
    return tuple(states)
