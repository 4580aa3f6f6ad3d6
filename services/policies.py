"""The policy registry: Gangway's own policy, the baselines its users would otherwise pick, and any of them
with knobs overridden; every `policy_version` a decision records resolves back to its `Policy` here.

Each entry is a plain, versioned `Policy` value built from the deciders' existing knobs, so the
simulator (or a what-if replay) runs the very same deciders under another policy:

| name | what it models | knobs that differ from `gangway` |
| --- | --- | --- |
| `gangway` | quota lending and borrowing in a cohort, fair share, within-nominal work first, no team's waiting head delayed by its team's later work, backfill around up to 4 aged reservations that a gang of a higher priority may pass (a gang drains capacity for itself only while it needs at most half its GPU type; a reservation on a node out of service, or on nodes that lost GPUs, is planned again on nodes in service; a gang its quota holds back reserves no nodes while its GPUs are free in number; a bigger gang reserves nodes once it has waited 7 days), topology-aware best-fit placement that packs racks (of equally tight nodes, the fullest rack's), checkpoint-aware reclaim preemption that holds what it frees for its gang (a hold on a node out of service let go at once) and makes room in one rack when victims no more protected allow it, consolidation (a gang its quota admits whose free GPUs are scattered gets whole nodes by moving smaller jobs that fit elsewhere, admitted again in the order the move planned), a run past its time limit ends (Slurm's TimeLimit), workers not all started 5 min after admission are requeued (Kueue's waitForPodsReady) | none |
| `fifo` | one strict FIFO queue of gangs: the head blocks everything behind it | no fair share, no within-nominal ordering, no backfill, no preemption |
| `static` | a static partition: each team confined to its nominal quota, nothing lent | no borrowing, no preemption |
| `kueue-like` | Kueue with BestEffortFIFO queues: lending, borrowing, reclaim and priority preemption, no topology or checkpoint awareness, one admission per queue per cycle | no fair share, no reservations, no protected queue heads, topology-blind first-fit placement, victims newest first with no checkpoint grace, no minimum runtime, 1 admission per team per cycle |
| `backfill` | Slurm-like FIFO with EASY backfill: the first blocked gang reserves nodes at once, later work backfills around it | no fair share, no within-nominal ordering, no protected team heads (the reservation protects the first gang), 1 reservation taken at once, no preemption |
| `tiresias` | Tiresias (NSDI 2019): discretised two-dimensional least-attained-service queues (GPUs x time received), preemption of whoever has received more, consolidated placement; no quotas, no lending, no team guarantees | no fair share, no within-nominal ordering, no reservations, no protected heads, least attained service first, time-sharing preemption across teams without the nominal-quota law, no priority or reclaim preemption |

Under the baselines a time limit only plans (backfill around reservations); none ends a run, and none times out
workers that do not start.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import replace
from typing import Any

from events.durations import parse_duration
from events.shown import shown
from services.admitter.policy import AdmissionPolicy
from services.placer.policy import PlacementPolicy
from services.policy import DEFAULT_POLICY, Policy
from services.preemptor.policy import PreemptionPolicy

GANGWAY = DEFAULT_POLICY

FIFO = Policy(
    version="fifo-1",
    admission=AdmissionPolicy(fair_share=False, nominal_first=False, backfill=False, max_reservations=0),
    preemption=PreemptionPolicy(enabled=False),
)

STATIC = Policy(
    version="static-1",
    admission=replace(AdmissionPolicy(), borrowing=False, max_drain_share=1.0),
    preemption=PreemptionPolicy(enabled=False),
)

KUEUE_LIKE = Policy(
    version="kueue-like-1",
    admission=AdmissionPolicy(fair_share=False, nominal_first=True, backfill=True, max_reservations=0,
                              admissions_per_team_per_cycle=1, protect_queue_heads=False),
    placement=PlacementPolicy(topology_aware=False, best_fit=False),
    preemption=PreemptionPolicy(enabled=True, within_team="LowerPriority", reclaim_within_cohort="Any",
                                borrow_within_cohort="LowerPriority", checkpoint_aware=False,
                                checkpoint_grace_ms=0, min_runtime_ms=0),
)

BACKFILL = Policy(
    version="backfill-1",
    admission=AdmissionPolicy(fair_share=False, nominal_first=False, backfill=True, reservation_after_ms=0,
                              max_reservations=1, protect_queue_heads=False, max_drain_share=1.0),
    preemption=PreemptionPolicy(enabled=False),
)

TIRESIAS = Policy(
    version="tiresias-1",
    admission=AdmissionPolicy(fair_share=False, nominal_first=False, backfill=True, max_reservations=0,
                              protect_queue_heads=False, least_attained_service=True, max_drain_share=1.0),
    preemption=PreemptionPolicy(enabled=True, within_team="Never", reclaim_within_cohort="Never",
                                borrow_within_cohort="Never", time_share="Any", keep_nominal=False),
)

#: name -> policy, in the order comparisons list them.
CATALOGUE: dict[str, Policy] = {
    "gangway": GANGWAY,
    "fifo": FIFO,
    "static": STATIC,
    "kueue-like": KUEUE_LIKE,
    "backfill": BACKFILL,
    "tiresias": TIRESIAS,
}


#: Earlier versions of the catalogue's policies: decisions recorded under them still resolve (verify, what-if).
_GANGWAY_10 = replace(GANGWAY, version="gangway-10",
                      admission=replace(GANGWAY.admission, release_holds_out_of_service=False,
                                        replan_unfit_reservations=False, priority_passes_reservations=False),
                      preemption=replace(GANGWAY.preemption, single_victims_always=False),
                      recovery=replace(GANGWAY.recovery, hold_victims_through_backoff=True))
_GANGWAY_9 = replace(_GANGWAY_10, version="gangway-9",
                     admission=replace(_GANGWAY_10.admission, earliest_deadline_first=False))
_GANGWAY_8 = replace(_GANGWAY_9, version="gangway-8", admission=replace(_GANGWAY_9.admission, replan_reservations=False,
                                                                        quota_held_reserves_free_nodes=True,
                                                                        big_gangs_reserve_after_ms=None))
_GANGWAY_7 = replace(_GANGWAY_8, version="gangway-7",
                     admission=replace(_GANGWAY_8.admission, quiet_cycles_reserve=False))
_GANGWAY_6 = replace(_GANGWAY_7, version="gangway-6",
                     admission=replace(_GANGWAY_7.admission, movers_in_plan_order=False))
_GANGWAY_5 = replace(_GANGWAY_6, version="gangway-5",
                     preemption=replace(_GANGWAY_10.preemption, keep_room_for_moves=False))
_GANGWAY_4 = replace(_GANGWAY_5, version="gangway-4", preemption=replace(_GANGWAY_5.preemption, consolidate=False))
_GANGWAY_3 = replace(_GANGWAY_4, version="gangway-3", placement=replace(_GANGWAY_10.placement, pack_domains=False),
                     preemption=replace(_GANGWAY_4.preemption, prefer_one_rack=False))
_GANGWAY_2 = replace(_GANGWAY_3, version="gangway-2",
                     recovery=replace(_GANGWAY_10.recovery, enforce_time_limits=False, start_timeout_ms=None))
EARLIER: dict[str, Policy] = {
    # before a hold on a node out of service was released before it ran out, each single victim was tried when the
    # victim search in candidate order found no set, an interrupted victim held nothing through its back-off, a
    # reservation whose nodes lost GPUs was planned again, and a higher priority passed another team's reservation
    "gangway-10": _GANGWAY_10,
    # before gangs of a team went by deadline (submission plus time limit): in submit order
    "gangway-9": _GANGWAY_9,
    # before a reservation holding a node out of service was planned again on nodes in service, while a gang its
    # quota held back reserved nodes even with its GPUs free in number (other teams' work kept off idle nodes), and
    # while a gang bigger than half its GPU type never reserved nodes, however long it waited
    "gangway-8": _GANGWAY_8,
    # before a quiet cycle let a gang reserve nodes whatever gangs of its size it had looked at first: the walk
    # over groups of equal needs and the walk over every gang could part on whether it reserved
    "gangway-7": _GANGWAY_7,
    # before moved jobs were admitted again in the order their move's plan placed them: an earlier small mover
    # could take the room the plan counted on for another, which then waited behind later gangs
    "gangway-6": _GANGWAY_6,
    # before consolidation kept the room its moves count on: a gang admitted while a moving job checkpointed
    # could take it, and the moved job waited
    "gangway-5": _GANGWAY_5,
    # before consolidation: a gang whose free GPUs were scattered waited for them to come together
    "gangway-4": _GANGWAY_4,
    # before nodes were packed rack by rack and preemption preferred room in one rack
    "gangway-3": _GANGWAY_3,
    # before time limits were enforced (a limit only planned backfill) and workers had a time to start
    "gangway-2": _GANGWAY_2,
    # before admission.max_drain_share: every gang could drain the whole cell for itself
    "gangway-1": replace(_GANGWAY_2, version="gangway-1", admission=replace(_GANGWAY_2.admission, max_drain_share=1.0)),
}


class UnknownPolicy(KeyError):
    """A policy name or version the registry cannot resolve; the message names the known ones."""

    def __str__(self) -> str:
        return self.args[0]


def policy(name: str) -> Policy:
    """The catalogue's policy of that name."""
    try:
        return CATALOGUE[name]
    except KeyError:
        raise UnknownPolicy(f"unknown policy {shown(name, 120)}; known: {', '.join(CATALOGUE)}") from None


def resolve(name_or_version: str) -> Policy:
    """The policy a name (`gangway`) or a recorded version (`gangway-1`, `fifo-1+admission.backfill=true`) stands
    for: a catalogue name or version, optionally followed by the knobs that differ from it (`gangway+...` is
    today's `gangway` so; its version names the catalogue version, so it resolves back)."""
    if name_or_version in CATALOGUE:
        return CATALOGUE[name_or_version]
    base_version, *knobs = name_or_version.split("+")
    base = CATALOGUE.get(base_version) or next(
        (p for p in [*CATALOGUE.values(), *EARLIER.values()] if p.version == base_version), None)
    if base is None:
        known = ", ".join(f"{name} ({p.version})" for name, p in CATALOGUE.items())
        raise UnknownPolicy(f"unknown policy {shown(name_or_version, 120)}; known: {known}, each optionally with "
                            f"+section.knob=value overrides")
    overrides: dict[str, dict[str, Any]] = {}
    for knob in knobs:
        path, equals, value = knob.partition("=")
        section, dot, name = path.partition(".")
        if not (equals and dot):
            raise UnknownPolicy(f"policy {shown(name_or_version, 120)}: {shown(knob)} is not section.knob=value")
        try:
            overrides.setdefault(section, {})[name] = json.loads(value)
        except json.JSONDecodeError:
            raise UnknownPolicy(f"policy {shown(name_or_version, 120)}: {shown(knob)} has no JSON value") from None
    try:
        return overridden(base, overrides)
    except ValueError as error:
        raise UnknownPolicy(f"policy {shown(name_or_version, 120)}: {error}") from None


def overridden(base: Policy, overrides: dict[str, Any]) -> Policy:
    """`base` with `{section: {knob: value}}` replaced; `_ms` knobs take durations ('5m') and may be written
    without the suffix. Its version is the base's with every knob that differs appended, so it resolves back.
    Raises ValueError naming an unknown section, knob or bad value."""
    policy = base
    for section, knobs in overrides.items():
        current = getattr(policy, section, None)
        if section == "version" or not dataclasses.is_dataclass(current):
            sections = [f.name for f in dataclasses.fields(Policy) if f.name != "version"]
            raise ValueError(f"unknown policy section {shown(section)} (one of: {', '.join(sections)})")
        if not isinstance(knobs, dict):
            raise ValueError(f"policy.{section} must be a mapping of knob: value")
        fields = {f.name: f for f in dataclasses.fields(current)}
        changes = {}
        for knob, value in knobs.items():
            name = knob if knob in fields else f"{knob}_ms"
            if name not in fields:
                raise ValueError(f"unknown knob policy.{section}.{knob if isinstance(knob, str) and len(knob) <= 40 else shown(knob)} (one of: {', '.join(fields)})")
            optional = "None" in str(fields[name].type)  # the knob may be null (`int | None`)
            changes[name] = None if value is None and optional else _coerce(section, name, getattr(current, name), value)
        policy = replace(policy, **{section: replace(current, **changes)})
    return policy.with_version(_derived_version(base, policy))


def _derived_version(base: Policy, policy: Policy) -> str:
    parts = [base.version]
    for f in dataclasses.fields(Policy):
        if f.name == "version":
            continue
        mine, theirs = dataclasses.asdict(getattr(policy, f.name)), dataclasses.asdict(getattr(base, f.name))
        parts += [f"{f.name}.{k}={json.dumps(v)}" for k, v in sorted(mine.items()) if theirs[k] != v]
    return "+".join(parts)


#: The longest duration a knob takes (366 days): longer is a mistake, not a policy.
MOST_KNOB_MS = 366 * 86_400_000

#: Integer knobs that may be negative (a priority, which a priority class may set below 0).
SIGNED_KNOBS = frozenset({"max_priority_threshold"})


def _coerce(section: str, name: str, default: Any, value: Any) -> Any:
    where = f"policy.{section}.{name}"
    if name.endswith("_ms"):
        if value is None or isinstance(value, bool):
            raise ValueError(f"{where} must be a duration, not {json.dumps(value)}")
        try:
            duration = parse_duration(value)
        except ValueError as error:
            raise ValueError(f"{where}: {error}") from None
        if duration < 0:
            raise ValueError(f"{where} must not be negative, not {shown(value)}")
        if duration > MOST_KNOB_MS:
            raise ValueError(f"{where} must be at most 366 days, not {shown(value)}")
        return duration
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ValueError(f"{where} must be true or false, not {shown(value)}")
        return value
    if isinstance(default, str):
        if not isinstance(value, str):
            raise ValueError(f"{where} must be a string, not {shown(value)}")
        return value
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{where} must be a number, not {shown(value)}")
        return float(value)
    if value is None and default is None:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0 and name not in SIGNED_KNOBS:
            raise ValueError(f"{where} must not be negative, not {shown(value)}")
        return value
    raise ValueError(f"{where} must be an integer{' or null' if default is None else ''}, not {shown(value)}")
