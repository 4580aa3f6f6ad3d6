"""Replicas on a log they share with others, as on Kafka: each service consumes a batch, decides, and commits
its decisions later, while inputs and the other services' decisions land in between in any order. Whatever
the interleaving, every replica's state is the log folded in order up to its offset, no GPU is bound twice
in any prefix of the fold, and `verify` reproduces every decision of every service from the log alone."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from events import models as m
from projections.cell import CellState
from projections.evolve import evolve
from projections.snapshot import dump
from replay.scenario.play import run
from replay.verify import verify
from services.core.replica import Replica
from services.deciders import DECIDERS
from tests.property.invariants import check_bindings, check_quota_usage
from tests.property.streams import DataChooser, stream


class SharedLog:
    """The cell's log and its fold in order, with the rows of every prefix kept for comparison."""

    def __init__(self) -> None:
        self.events: list[m.Event] = []
        self.fold = CellState()
        self.prefix_rows: list[dict] = []

    def append(self, event: m.Event) -> None:
        offset = len(self.events)
        self.events.append(event)
        evolve(self.fold, event, offset)
        check_bindings(self.fold)
        check_quota_usage(self.fold)
        self.prefix_rows.append(dump(self.fold))


def play_interleaved(inputs: list[m.Event], policy, rng: random.Random) -> tuple[SharedLog, dict[str, Replica]]:
    log = SharedLog()
    replicas = {name: Replica(decider(), policy) for name, decider in sorted(DECIDERS.items())}
    read = dict.fromkeys(replicas, 0)  # next offset each replica consumes
    outbox: dict[str, list[m.Decision]] = {name: [] for name in replicas}  # decided, not yet committed
    pending = list(inputs)
    while True:
        actions = [("input", "")] if pending else []
        for name in replicas:
            if outbox[name]:
                actions.append(("commit", name))  # a replica commits a batch before it reads the next one
            elif read[name] < len(log.events):
                actions.append(("consume", name))
        if not actions:
            return log, replicas
        action, name = rng.choice(actions)
        if action == "input":
            log.append(pending.pop(0))
        elif action == "commit":
            for decision in outbox[name]:
                log.append(decision)
            outbox[name] = []
        else:
            replica = replicas[name]
            batch = rng.randint(1, 8)
            for offset in range(read[name], min(read[name] + batch, len(log.events))):
                outbox[name] += replica.consume(offset, log.events[offset])
                read[name] = offset + 1
            replica.settle()  # its decisions in flight may stay laid between batches; the log's fold is under them
            assert dump(replica.state) == log.prefix_rows[replica.offset], (
                f"{name}'s state at offset {replica.offset} is not the log folded in order")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_any_interleaving_gives_each_replica_the_log_folded_in_order(data):
    scenario = stream(DataChooser(data), steps=30)
    outcome = run(scenario)
    inputs = [e for e in outcome.cell.log if not e.is_decision]
    seed = data.draw(st.integers(0, 2**32), label="interleaving seed")
    log, replicas = play_interleaved(inputs, outcome.cell.policy, random.Random(seed))
    note(f"{len(log.events)} events, {sum(e.is_decision for e in log.events)} decisions")
    for name, replica in replicas.items():
        replica.settle()
        assert replica.offset == len(log.events) - 1
        assert dump(replica.state) == log.prefix_rows[-1], name
        for persistent in (True, False):  # an overlay kept laid decides exactly as one laid for each decision
            verdict = verify(list(enumerate(log.events)), DECIDERS[name](), outcome.cell.policy, persistent=persistent)
            assert verdict.ok, (persistent, verdict)
