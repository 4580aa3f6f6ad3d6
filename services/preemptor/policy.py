"""Preemption knobs: when eviction is allowed, whom each team may evict by default, and how long a victim has to
checkpoint. A team's own rules (TeamDefined) override the three rule defaults; services/preemptor/victims.py
says what each rule allows."""

from __future__ import annotations

from dataclasses import dataclass

#: The values each rule accepts (Kueue's ClusterQueue `preemption`).
RULE_VALUES = {
    "within_team": ("Never", "LowerPriority", "LowerOrNewerEqualPriority"),
    "reclaim_within_cohort": ("Never", "LowerPriority", "Any"),
    "borrow_within_cohort": ("Never", "LowerPriority"),
}


TIME_SHARE_VALUES = ("Never", "WithinTeam", "Any")


@dataclass(frozen=True)
class PreemptionPolicy:
    enabled: bool = True
    within_team: str = "LowerPriority"  # a team's higher-priority gangs evict its lower-priority jobs
    reclaim_within_cohort: str = "Any"  # a team within its nominal evicts borrowers of its cohort, of any priority
    borrow_within_cohort: str = "LowerPriority"  # a gang that must borrow evicts lower-priority borrowers
    max_priority_threshold: int | None = None  # ... of at most this priority (None: any lower one)
    checkpoint_aware: bool = True  # prefer victims that lose the least work since their last checkpoint
    checkpoint_grace_ms: int = 5 * 60_000
    min_runtime_ms: int = 10 * 60_000  # a job just (re)started is protected this long
    wait_before_preempting_ms: int = 0  # how long a gang must have waited before it may preempt
    #: Time-sharing by least attained service (Tiresias): a waiting gang may preempt a running job of at most its
    #: priority that has received more GPU-time, by service band (projections/jobs.py), of its own team
    #: (`WithinTeam`) or any team (`Any`); `Never` turns it off.
    time_share: str = "Never"
    keep_nominal: bool = True  # the law: no victim of another team takes its team below its nominal quota
    #: when the cheapest victims leave room only across racks, take victims no more protected that make room in one
    prefer_one_rack: bool = False
    #: a gang its quota admits whose GPUs are free in number but scattered moves smaller jobs that fit elsewhere
    #: (services/preemptor/consolidation.py)
    consolidate: bool = False
    #: the room a consolidation's moves count on is kept for the moving jobs until they have left, and a hold whose
    #: victims no longer fit elsewhere when it is folded is released before anyone is asked
    keep_room_for_moves: bool = False
    #: when no set of victims is found in the candidates' order, each victim that alone makes room is still tried
    #: (a first pick that frees nothing useful, such as GPUs on a node reserved for another gang, no longer hides a
    #: single victim that would do)
    single_victims_always: bool = False

    def __post_init__(self) -> None:
        if self.time_share not in TIME_SHARE_VALUES:
            raise ValueError(f"policy.preemption.time_share must be one of {', '.join(TIME_SHARE_VALUES)}, "
                             f"not {self.time_share!r}")
        for name, values in RULE_VALUES.items():
            if getattr(self, name) not in values:
                raise ValueError(f"policy.preemption.{name} must be one of {', '.join(values)}, "
                                 f"not {getattr(self, name)!r}")
