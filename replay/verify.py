"""Re-runs each service over a recorded cell log and checks it reproduces every decision it wrote.

A service folds the log in order, folds its own decisions as soon as it makes them ("assumed"),
and answers each of them again once read back with its offset — exactly what the Kafka shell does.
So each recorded decision must come out again, equal field for field, and nothing else may.
Recovery's `NodeFailed` is the one decision made on input outside the main log (heartbeats on
their own topic): it is taken as the fact it records, with its evidence, not re-derived.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from events import models as m
from events.reader import read_log
from events.topics import cells_from_env
from projections.cell import CellState
from projections.evolve import fold_assumed
from services.core.decider import Context, Decider, step
from services.policy import DEFAULT_POLICY, Policy
from services.run_cli import DECIDERS

#: Decisions made on input the main log does not hold.
FROM_SIDE_INPUT = (m.NodeFailed,)


@dataclass
class Verdict:
    """What one service's replay found."""

    service: str
    reproduced: int = 0
    missing: list[str] = field(default_factory=list)  # recorded, but not decided again
    different: list[str] = field(default_factory=list)  # decided again with other contents
    extra: list[str] = field(default_factory=list)  # decided again, but never recorded

    @property
    def ok(self) -> bool:
        return not (self.missing or self.different or self.extra)


def verify(logged: Sequence[tuple[int, m.Event]], decider: Decider, policy: Policy,
           upto: int | None = None) -> Verdict:
    """Replays `decider` over the log; decisions based past `upto` (events the live service had not
    reached when it stopped) are not expected to be recorded."""
    verdict = Verdict(decider.name)
    recorded = {e.envelope.event_id: e for _, e in logged
                if e.is_decision and e.envelope.producer == decider.name and not isinstance(e, FROM_SIDE_INPUT)}
    state = CellState()
    assumed: set[str] = set()
    decided: dict[str, m.Event] = {}
    for offset, event in logged:
        if event.envelope.event_id in assumed:
            assumed.discard(event.envelope.event_id)
            state.offset = offset
            decisions = decider.decide(state, event, Context(decider.name, event, offset, policy))
        else:
            decisions = step(state, event, offset, [decider], policy)
        for decision in decisions:
            fold_assumed(state, decision)
            assumed.add(decision.envelope.event_id)
            decided[decision.envelope.event_id] = decision
    for event_id, decision in decided.items():
        if isinstance(decision, FROM_SIDE_INPUT):
            continue
        original = recorded.get(event_id)
        if original is None:
            if upto is None or (decision.envelope.basis_offset or 0) <= upto:
                verdict.extra.append(event_id)
        elif original != decision:
            verdict.different.append(event_id)
        else:
            verdict.reproduced += 1
    verdict.missing = sorted(set(recorded) - set(decided))
    return verdict


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cell", default=None, help="default: the first of $GANGWAY_CELLS")
    parser.add_argument("--service", choices=sorted(DECIDERS), action="append",
                        help="the services to verify (repeatable; default all four)")
    parser.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"))


def run(args: argparse.Namespace) -> int:
    cells = cells_from_env()
    logged = read_cell_log(args.bootstrap_servers, args.cell or cells[0], cells)
    failed = False
    for name in args.service or sorted(DECIDERS):
        verdict = verify(logged, DECIDERS[name](), DEFAULT_POLICY)
        failed |= not verdict.ok
        print(f"{name:10} reproduced {verdict.reproduced:,}; missing {len(verdict.missing)}, "
              f"different {len(verdict.different)}, extra {len(verdict.extra)}")
        for label, ids in (("missing", verdict.missing), ("different", verdict.different), ("extra", verdict.extra)):
            for event_id in ids[:10]:
                print(f"  {label}: {event_id}")
    print(f"{len(logged):,} events read; " + ("some decisions were not reproduced" if failed else "every decision reproduced"))
    return 1 if failed else 0


def read_cell_log(bootstrap: str, cell: str, cells: Sequence[str]) -> list[tuple[int, m.Event]]:
    """The cell's committed log from offset 0, as (offset, event); undecodable records are left out."""
    return [(r.offset, r.event) for r in read_log(cell, bootstrap, all_cells=cells) if r.event is not None]
