"""Re-runs each service over a recorded cell log and checks it reproduces every decision it wrote.

Each service is replayed as a replica (services/core/replica.py), the unit its Kafka shell runs: it folds
the log in order and decides on each event with its own in-flight decisions in view. So each recorded
decision must come out again, equal field for field, and nothing else may. Decisions made on side input
(recovery's failures for heartbeat silence; heartbeats are not on the main log) are taken as the facts
the log records, at the basis it records for them. Several services are replayed over one fold of the log: their
replicas share the state, each laying its decisions in flight only while it decides (`verify_all`).

A log altered by hand shows: a decision dropped comes out again with nothing recorded (extra), a field
changed makes the recorded decision differ from the replayed one, an input moved makes the decisions on it
differ (each names its cause and basis), and offsets out of order are refused as they are read. The first
divergence, by basis offset, is shown with both versions and the event it was based on.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from events import models as m
from events.command import answered
from projections.cell import CellState
from replay.audit.policy import named
from replay.source import AuditError, add_source_arguments, audited, read_source
from services.core.decider import Decider
from services.core.replica import Replica, fold
from services.deciders import DECIDERS
from services.policies import UnknownPolicy, resolve
from services.policy import DEFAULT_POLICY, Policy


@dataclass(frozen=True)
class Divergence:
    """One decision that did not reproduce: as recorded (at its offset) and as replayed, either may be absent."""

    service: str
    kind: str  # missing, different or extra
    event_id: str
    basis: int
    recorded: m.Decision | None
    replayed: m.Decision | None
    offset: int | None = None  # where the recorded one lies in the log

    def differing_fields(self) -> list[str]:
        if self.recorded is None or self.replayed is None:
            return []
        mine, theirs = self.recorded.model_dump(mode="json"), self.replayed.model_dump(mode="json")
        out = [f"envelope.{k}" for k in mine["envelope"] if mine["envelope"][k] != theirs["envelope"][k]]
        return out + [k for k in mine if k != "envelope" and mine[k] != theirs.get(k)]


@dataclass
class Verdict:
    """What one service's replay found."""

    service: str
    reproduced: int = 0
    missing: list[str] = field(default_factory=list)  # recorded, but not decided again
    different: list[str] = field(default_factory=list)  # decided again with other contents
    extra: list[str] = field(default_factory=list)  # decided again, but never recorded
    divergences: list[Divergence] = field(default_factory=list)  # all of the above, by basis offset

    @property
    def ok(self) -> bool:
        return not (self.missing or self.different or self.extra)

    @property
    def first(self) -> Divergence | None:
        return self.divergences[0] if self.divergences else None


def verify(logged: Sequence[tuple[int, m.Event]], decider: Decider, policy: Policy | None = None,
           upto: int | None = None, persistent: bool = True) -> Verdict:
    """Replays `decider` over the log, each decision under the policy its record names (or all under `policy`);
    decisions based past `upto` (events the live service had not reached when it stopped) are not expected to
    be recorded. Raises UnknownPolicy for a recorded version the registry does not know."""
    return verify_all(logged, [decider], policy, upto, persistent)[0]


def verify_all(logged: Sequence[tuple[int, m.Event]], deciders: Sequence[Decider], policy: Policy | None = None,
               upto: int | None = None, persistent: bool = True) -> list[Verdict]:
    """`verify` for each of `deciders`, folding the log once: several replicas share one state and each lays its
    decisions in flight only while it decides (services/core/replica.py `replicas`), as an in-memory cell's do.
    How a replica lays them changes no decision, only the cost; `persistent` is for a single decider's replica,
    which has its state to itself."""
    state = CellState(tracks_rows=False)  # no store saves it
    shared = len(deciders) > 1
    replays = [_Replay.of(logged, decider, policy, state, persistent and not shared) for decider in deciders]
    if not shared:  # a replica of its own keeps its overlay laid between records
        replay = replays[0]
        for offset, event in logged:
            replay.keep(replay.at(offset).consume(offset, event))
    else:
        for offset, event in logged:
            refused = fold(state, event, offset)
            for replay in replays:
                replay.keep(replay.at(offset).answer(offset, event, refused))
    return [replay.verdict(upto) for replay in replays]


@dataclass
class _Replay:
    """One service's replay: its recorded decisions (by id, offset and basis), the policy versions it ran under,
    and what its replica decides again."""

    decider: Decider
    recorded: dict[str, m.Decision]
    where: dict[str, int]
    by_basis: dict[int, list[m.Decision]]
    versions: dict[int, str]
    replica: Replica
    decided: dict[str, m.Event] = field(default_factory=dict)

    @classmethod
    def of(cls, logged: Sequence[tuple[int, m.Event]], decider: Decider, policy: Policy | None, state: CellState,
           persistent: bool) -> _Replay:
        """The service's recorded decisions, and its replica over `state` (its own, or shared with others')."""
        recorded: dict[str, m.Decision] = {}
        where: dict[str, int] = {}
        name = decider.name
        for o, e in logged:
            if e.is_decision and e.envelope.producer == name:
                recorded[e.envelope.event_id] = e
                where[e.envelope.event_id] = o
        by_basis: dict[int, list[m.Decision]] = {}
        for decision in recorded.values():
            by_basis.setdefault(decision.envelope.basis_offset or 0, []).append(decision)
        versions = {} if policy is not None else {
            basis: decisions[0].envelope.policy_version for basis, decisions in by_basis.items()
            if decisions[0].envelope.policy_version}
        # Before its first decision, a service ran under the policy the cell's other services record, if any.
        cell_version = next((e.envelope.policy_version for _, e in logged
                             if e.is_decision and e.envelope.policy_version), None)
        first = versions[min(versions)] if versions else cell_version
        start = policy or (resolve(first) if first is not None else DEFAULT_POLICY)
        replica = Replica(decider, start, state, recorded=lambda offset: by_basis.get(offset, ()),
                          persistent=persistent)
        return cls(decider, recorded, where, by_basis, versions, replica)

    def at(self, offset: int) -> Replica:
        """The replica, under the policy the service ran under from `offset` on."""
        version = self.versions.get(offset)
        if version is not None and version != self.replica.policy.version:
            self.replica.policy = resolve(version)  # the service ran under another policy from here on
        return self.replica

    def keep(self, decisions: Sequence[m.Decision]) -> None:
        for decision in decisions:
            self.decided[decision.envelope.event_id] = decision

    def verdict(self, upto: int | None) -> Verdict:
        name, recorded, where = self.decider.name, self.recorded, self.where
        verdict = Verdict(name)
        found: list[Divergence] = []
        for event_id, decision in self.decided.items():
            original = recorded.get(event_id)
            basis = decision.envelope.basis_offset or 0
            if original is None:
                if upto is None or basis <= upto:
                    verdict.extra.append(event_id)
                    found.append(Divergence(name, "extra", event_id, basis, None, decision))
            elif original != decision:
                verdict.different.append(event_id)
                found.append(Divergence(name, "different", event_id, basis, original, decision, where[event_id]))
            else:
                verdict.reproduced += 1
        verdict.missing = sorted(set(recorded) - set(self.decided))
        found += [Divergence(name, "missing", i, recorded[i].envelope.basis_offset or 0, recorded[i], None,
                             where[i]) for i in verdict.missing]
        verdict.divergences = sorted(found, key=lambda d: (d.basis, d.offset if d.offset is not None else -1,
                                                           d.event_id))
        return verdict


example = "gangway verify --log tests/golden/reclaim_within_cohort.avro"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--service", choices=sorted(DECIDERS), action="append",
                        help="the services to verify (repeatable; default all four)")
    parser.add_argument("--policy", default=None,
                        help="replay every decision under this policy (name or version) instead of the one it records")
    add_source_arguments(parser)


def run(args: argparse.Namespace) -> int:
    return audited("verify", _verify)(args)


def _verify(args: argparse.Namespace) -> int:
    policy = named(args.policy) if args.policy else None
    log = read_source(args)
    names = args.service or sorted(DECIDERS)
    try:
        verdicts = verify_all(log.records, [DECIDERS[name]() for name in names], policy)
    except UnknownPolicy as error:
        raise AuditError(f"the log records a policy this Gangway does not know: {error}") from None
    for name, verdict in zip(names, verdicts):
        print(f"{name:10} reproduced {verdict.reproduced:,}; missing {len(verdict.missing)}, "
              f"different {len(verdict.different)}, extra {len(verdict.extra)}")
    forged = [e for _, e in log.records
              if isinstance(e, m.RecordRefused) and e.envelope.reason == m.Reason.NOT_ITS_WRITER]
    if forged:  # reproduced like any refusal; still worth an operator's eye
        print(f"{len(forged):,} records refused because their writer may not write them (NOT_ITS_WRITER), e.g. "
              f"offset {forged[0].refused_offset}: {forged[0].detail}")
    failed = [v for v in verdicts if not v.ok]
    print(f"{len(log.records):,} events read from {log.origin}; "
          + ("some decisions were not reproduced" if failed else "every decision reproduced"))
    if failed:
        first = min((v.first for v in failed if v.first), key=lambda d: (d.basis, d.offset or -1, d.event_id))
        print(render_divergence(first, dict(log.records)))
    return answered(1 if failed else 0)


def render_divergence(d: Divergence, by_offset: dict[int, m.Event]) -> str:
    """The first decision that did not reproduce: both versions, what differs, and the event it was based on."""
    lines = [f"first divergence: {d.service} decision {d.event_id} ({d.kind})"]
    cause = by_offset.get(d.basis)
    lines.append(f"  basis: offset {d.basis}: " + (f"{cause.event_type} {cause.envelope.event_id} at "
                                                    f"{cause.envelope.at}" if cause else "no event at that offset"))
    where = f"at offset {d.offset}" if d.offset is not None else "not in the log"
    lines.append(f"  recorded ({where}): " + (_fields(d.recorded) if d.recorded else "nothing"))
    replayed = _fields(d.replayed) if d.replayed else "nothing (the replica decides no such thing)"
    lines.append(f"  replayed: {replayed}")
    if d.differing_fields():
        lines.append(f"  fields that differ: {', '.join(d.differing_fields())}")
    return "\n".join(lines)


def _fields(decision: m.Decision) -> str:
    return f"{decision.event_type} " + json.dumps(decision.model_dump(mode="json"), sort_keys=False)
