"""Re-runs each service over a recorded cell log and checks it reproduces every decision it wrote.

Each service is replayed as a replica (services/core/replica.py), the unit its Kafka shell runs: it folds
the log in order and decides on each event with its own in-flight decisions in view. So each recorded
decision must come out again, equal field for field, and nothing else may. Decisions made on side input
(recovery's failures for heartbeat silence; heartbeats are not on the main log) are taken as the facts
the log records, at the basis it records for them.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from events import models as m
from events.reader import read_log
from events.topics import cells_from_env
from services.core.decider import Decider
from services.core.replica import Replica
from services.policies import UnknownPolicy, resolve
from services.policy import DEFAULT_POLICY, Policy
from services.run_cli import DECIDERS


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


def verify(logged: Sequence[tuple[int, m.Event]], decider: Decider, policy: Policy | None = None,
           upto: int | None = None, persistent: bool = True) -> Verdict:
    """Replays `decider` over the log, each decision under the policy its record names (or all under `policy`);
    decisions based past `upto` (events the live service had not reached when it stopped) are not expected to
    be recorded. Raises UnknownPolicy for a recorded version the registry does not know."""
    verdict = Verdict(decider.name)
    recorded = {e.envelope.event_id: e for _, e in logged if e.is_decision and e.envelope.producer == decider.name}
    by_basis: dict[int, list[m.Decision]] = {}
    for decision in recorded.values():
        by_basis.setdefault(decision.envelope.basis_offset or 0, []).append(decision)
    versions = {} if policy is not None else {
        basis: decisions[0].envelope.policy_version for basis, decisions in by_basis.items()
        if decisions[0].envelope.policy_version}
    # Before its first decision, a service ran under the policy the cell's other services record, if any.
    cell_version = next((e.envelope.policy_version for _, e in logged if e.is_decision and e.envelope.policy_version),
                        None)
    first = versions[min(versions)] if versions else cell_version
    start = policy or (resolve(first) if first is not None else DEFAULT_POLICY)
    replica = Replica(decider, start, recorded=lambda offset: by_basis.get(offset, ()), persistent=persistent)
    decided: dict[str, m.Event] = {}
    for offset, event in logged:
        version = versions.get(offset)
        if version is not None and version != replica.policy.version:
            replica.policy = resolve(version)  # the service ran under another policy from here on
        for decision in replica.consume(offset, event):
            decided[decision.envelope.event_id] = decision
    for event_id, decision in decided.items():
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
    parser.add_argument("--policy", default=None,
                        help="replay every decision under this policy (name or version) instead of the one it records")
    parser.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"))


def run(args: argparse.Namespace) -> int:
    cells = cells_from_env()
    logged = read_cell_log(args.bootstrap_servers, args.cell or cells[0], cells)
    failed = False
    for name in args.service or sorted(DECIDERS):
        try:
            verdict = verify(logged, DECIDERS[name](), resolve(args.policy) if args.policy else None)
        except UnknownPolicy as error:
            print(f"gangway verify: {error}", file=sys.stderr)
            return 1
        failed |= not verdict.ok
        print(f"{name:10} reproduced {verdict.reproduced:,}; missing {len(verdict.missing)}, "
              f"different {len(verdict.different)}, extra {len(verdict.extra)}")
        for label, ids in (("missing", verdict.missing), ("different", verdict.different), ("extra", verdict.extra)):
            for event_id in ids[:10]:
                print(f"  {label}: {event_id}")
    forged = [e for _, e in logged if isinstance(e, m.RecordRefused) and e.envelope.reason == m.Reason.NOT_ITS_WRITER]
    if forged:  # reproduced like any refusal; still worth an operator's eye
        print(f"{len(forged):,} records refused because their writer may not write them (NOT_ITS_WRITER), e.g. "
              f"offset {forged[0].refused_offset}: {forged[0].detail}")
    print(f"{len(logged):,} events read; " + ("some decisions were not reproduced" if failed else "every decision reproduced"))
    return 1 if failed else 0


def read_cell_log(bootstrap: str, cell: str, cells: Sequence[str]) -> list[tuple[int, m.Event]]:
    """The cell's committed log from offset 0, as (offset, event); undecodable records are left out."""
    return [(r.offset, r.event) for r in read_log(cell, bootstrap, all_cells=cells) if r.event is not None]
