"""Admission knobs: borrowing, ordering, and how a big gang's reservation ages in."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AdmissionPolicy:
    borrowing: bool = True  # may teams use unused, lendable quota of their cohort
    fair_share: bool = True  # order teams by weighted dominant share (else by submit time only)
    #: Admit work within its team's nominal quota before work that would borrow (Kueue does); off:
    #: one queue in priority and submit order whatever the quotas (Slurm, plain FIFO).
    nominal_first: bool = True
    backfill: bool = True  # may smaller work pass a blocked gang (around its reservation)
    #: A blocked gang waits this long before it holds a reservation; until then smaller work passes
    #: it freely, afterwards the reserved nodes drain for it (only work that ends in time backfills).
    reservation_after_ms: int = 5 * 60_000
    max_reservations: int = 4  # at most this many gangs hold reservations at once
    #: Slurm's backfill guarantee: no lower-ranked work is admitted if it would delay the expected start of a
    #: gang that heads its team's queue, or the cell's (services/core/heads.py); off: smaller work passes freely
    protect_queue_heads: bool = True
    #: A gang drains capacity for itself (a reservation, a queue head that lower-ranked work may not delay) only
    #: while it needs at most this share of its GPU type's schedulable GPUs; a bigger gang starts when enough
    #: frees on its own, as under Kueue: draining most of a cell for one gang idles more than it saves.
    max_drain_share: float = 0.5
    #: A gang bigger than `max_drain_share` may reserve nodes too once it has waited this long (Slurm's backfill
    #: reserves for the job that has waited longest, whatever its size), so no stream of smaller work that keeps
    #: enough from freeing at once starves it; gangway-9: 7 days, Slurm's default PriorityMaxAge (past which a job's age
    #: stops adding to its priority): a bound that fires only on a gang starved that long; None (gangway-8 and the
    #: baselines): never, it starts only when enough frees on its own.
    big_gangs_reserve_after_ms: int | None = None
    #: A gang bigger than `max_drain_share` may reserve nodes once it has waited as long as their drain would take,
    #: by the time limits of the jobs on them (a ski-rental rule: the drain idles no more GPU-time than the gang has
    #: already spent waiting); off (`gangway`): the drain's length does not matter.
    big_gangs_reserve_on_known_drain: bool = False
    #: Within a team and priority, gangs that have received less GPU-time go first (Tiresias' discretised
    #: least-attained-service queues; projections/jobs.py service_band), then submit order.
    least_attained_service: bool = False
    #: Within a team, priority and service band, gangs go by deadline: their submission plus their time limit (the
    #: end each asked for had it started at once; a gang without a limit counts as 7 days, projections/jobs.py),
    #: earliest first, then submit order. Earliest deadline first with deadlines a stretch of the asked-for time after
    #: submission (Bender et al. 1998) favours short work as shortest-job-first does, yet bounds how long a gang
    #: waits for work that came after it: none submitted more than its time limit later passes it. It rewards a
    #: tight time limit, which Gangway enforces. Off (`gangway-9` and the baselines): submit order.
    earliest_deadline_first: bool = False
    #: Above 0, least attained service (this order) and preemption's time-sharing (whether or not the order is on)
    #: apply only while the GPU-time the cell's succeeded jobs received varies more than this coefficient of
    #: variation, once at least LAS_SAMPLES of them have ended. Least attained service beats first come, first
    #: served when service times vary more than an exponential distribution's (1.0); below that sharing only adds
    #: restarts, and the jobs it set back wait behind newcomers. 0: always.
    least_attained_service_min_cv: float = 0.0
    admissions_per_team_per_cycle: int | None = None  # None: no limit (Kueue admits one per queue)
    #: Jobs that moved for a consolidation are admitted again biggest first, then by job id: the order in which the
    #: move's plan found each of them room (services/preemptor/consolidation.py), so none takes the room the plan
    #: counted on for another; off: in queue order, where an earlier small mover may take a later one's room.
    movers_in_plan_order: bool = False
    #: A quiet cycle (no Tick) asks each gang it looks at whether it may reserve nodes, and reserves them if it may and
    #: nodes are found, even when a gang of its size already found no room in the cycle, or its team's quota refused
    #: one no bigger; off (gangway-7): such a gang is skipped, so whether it reserves in the cycle depends on which
    #: gangs the cycle looked at first. (A quiet cycle looks only at gangs whose GPUs are free in number; a bigger
    #: one reserves on the next Tick either way.)
    quiet_cycles_reserve: bool = False
    #: A reservation drains the nodes expected to free first by the time limits of the jobs on them (Slurm's
    #: backfill plans a pending job's start so), a node with a job of no limit last, and of the domains that could
    #: hold the gang the one whose nodes are expected free first; off (`gangway`): the nodes with the most GPUs free
    #: now, and the domain with the fewest busy.
    reserve_earliest_free: bool = False
    #: A gang its quota holds back (its team's nominal fits it, the pool has nothing left) may reserve nodes even while
    #: its GPUs are free in number (gangway-8 and the baselines): the reservation drains nothing and keeps other teams'
    #: work off nodes already free, work within their own nominal included; off (gangway-9): only while its GPUs are
    #: not free in number (Slurm plans no start for a job held by a limit).
    quota_held_reserves_free_nodes: bool = True
    #: A reservation that holds a node out of service (cordoned, failed) is planned again on nodes in service on the
    #: next Tick, where the gang may still drain them (Slurm plans a pending job's start again on each backfill
    #: pass; gangway-9); off (gangway-8 and the baselines): it waits for its node to come back, however long an
    #: operator's cordon lasts.
    replan_reservations: bool = False
    #: A hold that holds a node out of service (failed, cordoned) is released (HOLD_STALE) once none of its victims
    #: is still making room, and the preemptor looks for room again; off (gangway-10 and earlier): it is kept until
    #: it runs out, though the gang cannot run on it.
    release_holds_out_of_service: bool = False
    #: With `replan_reservations`, a reservation whose nodes together can no longer hold its gang (a GPU of one was
    #: retired after an Xid) is planned again too; off (gangway-10 and earlier): it keeps draining nodes its gang
    #: cannot use, and work that would fit there waits behind it.
    replan_unfit_reservations: bool = False
    #: A gang of a higher priority than a reservation's holder may use its nodes whatever the holder's team, as
    #: Slurm's backfill plans jobs in one priority order; off (gangway-10 and earlier): only the holder's own team's
    #: higher-ranked gangs may, and a higher-priority gang of another team waits behind the reservation.
    priority_passes_reservations: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.least_attained_service_min_cv <= 100:
            raise ValueError("policy.admission.least_attained_service_min_cv must be between 0 and 100, not "
                             f"{self.least_attained_service_min_cv!r}")
        if self.admissions_per_team_per_cycle is not None and self.admissions_per_team_per_cycle < 1:
            raise ValueError("policy.admission.admissions_per_team_per_cycle must be at least 1 (or null: no limit), "
                             f"not {self.admissions_per_team_per_cycle!r}")
        if self.big_gangs_reserve_after_ms is not None and self.big_gangs_reserve_after_ms < 0:
            raise ValueError("policy.admission.big_gangs_reserve_after_ms must be a duration of at least 0 (or null: "
                             f"never), not {self.big_gangs_reserve_after_ms!r}")
        if not 0 < self.max_drain_share <= 1:
            raise ValueError(f"policy.admission.max_drain_share must be in (0, 1], not {self.max_drain_share!r}")
