"""When reserved nodes come free (a reservation's shadow time) and whether a job ends before it: the arithmetic of
Slurm's EASY backfill, shared by the admitter, which backfills around reservations, and by `evolve`, which
supersedes a backfill that a later fact made too long for its reservation; and who outranks a reservation's
holder, and so may use its nodes anyway."""

from __future__ import annotations

from collections.abc import Sequence

from projections.cell import CellState
from projections.jobs import Job


def expected_end(job: Job) -> int | None:
    """When a job holding GPUs should end: its start (or admission) plus its time limit; None without a limit."""
    start = job.running_since if job.running_since is not None else job.admitted_at
    if job.time_limit_ms is None or start is None:
        return None
    return start + job.time_limit_ms


def shadow_time(state: CellState, nodes: Sequence[str], now: int, gone: frozenset[str] = frozenset()) -> int | None:
    """When reserved `nodes` are expected to be free: the latest expected end of the jobs holding GPUs
    there (other than `gone`), `now` when none does, None when one of them has no time limit."""
    known, jobs = state.cluster.nodes, state.jobs
    holders: set[str] = set()
    for name in nodes:
        node = known.get(name)
        if node is not None:
            holders.update(node.holder.values())
    shadow = now
    for job_id in holders:  # None if any has no limit, else the latest end: the same in any order
        if job_id in gone:
            continue
        end = expected_end(jobs[job_id])
        if end is None:
            return None
        if end > shadow:
            shadow = end
    return shadow


def outranks(job: Job, other: Job | None, by_deadline: bool = False, across_teams: bool = False) -> bool:
    """Whether `job` comes before `other` in their team's queue (priority, then submit order; `by_deadline`:
    priority, then deadline), or, `across_teams`, is of another team and a higher priority: a reservation keeps
    lower-ranked work off its gang's nodes, not higher-ranked."""
    if other is None:
        return False
    if other.team != job.team:
        return across_teams and job.priority > other.priority
    return job.deadline_rank() < other.deadline_rank() if by_deadline else job.rank_key() < other.rank_key()


def ends_before(job: Job, now: int, shadow: int | None) -> bool:
    """Whether `job`, started now, ends by its time limit before a reservation's (known) shadow time."""
    return job.time_limit_ms is not None and shadow is not None and now + job.time_limit_ms <= shadow
