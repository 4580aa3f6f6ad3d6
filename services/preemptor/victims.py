"""Who may be preempted for whom: each team's preemption rules, the candidates they allow, and the law that no
other team is ever preempted below its nominal quota.

The rules are Kueue's ClusterQueue `preemption`, set per team on the log (TeamDefined), with the policy's
defaults (services/preemptor/policy.py) for what a team leaves out:

- `within_team` (withinClusterQueue): victims of the gang's own team. `Never`; `LowerPriority`;
  `LowerOrNewerEqualPriority` (also equal priority, submitted after the gang).
- `reclaim_within_cohort`: victims in the other teams of the cohort that borrow, when the gang fits its team's
  nominal quota. `Never` (no victim in another team at all, borrowing or not); `LowerPriority`; `Any`.
- `borrow_within_cohort` with `max_priority_threshold`: when the gang must borrow, victims in the other teams
  that borrow, of lower priority than the gang and at most the threshold (on top of what `reclaim_within_cohort`
  allows, as in Kueue). `Never` or `LowerPriority`.

Victims of other teams are taken only while their team stays at or above its nominal quota once every victim
of the set is gone (YuniKorn's law): reclaim and borrowing preemption take back what a team borrowed, never
what it is owed. Within a team, priority decides alone.

With the policy's `time_share` (Tiresias' least attained service), a gang may also preempt a running job of at
most its priority whose service band, counting its current run, is above the gang's: of its own team
(`WithinTeam`) or of any team (`Any`, under the law unless the policy drops it with `keep_nominal`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from events.models import PreemptionRule, Reason
from projections.cell import CellState
from projections.jobs import LAST_BAND, Job, JobState, service_band

if TYPE_CHECKING:  # the knobs are a value the caller passes in
    from services.preemptor.policy import PreemptionPolicy

Usage = dict[tuple[str, str], int]


@dataclass(frozen=True)
class Rules:
    """The preemption rules a team's waiting gangs follow."""

    within_team: str
    reclaim_within_cohort: str
    borrow_within_cohort: str
    max_priority_threshold: int | None


def rules(state: CellState, team: str, policy: PreemptionPolicy) -> Rules:
    """The team's own rules (TeamDefined), each one it leaves out taken from the policy."""
    spec = state.tenancy.teams.get(team)
    own = spec.preemption if spec is not None else None
    threshold = own.max_priority_threshold if own is not None else None
    return Rules(
        (own and own.within_team) or policy.within_team,
        (own and own.reclaim_within_cohort) or policy.reclaim_within_cohort,
        (own and own.borrow_within_cohort) or policy.borrow_within_cohort,
        threshold if threshold is not None else policy.max_priority_threshold,
    )


def within_nominal(state: CellState, job: Job, usage: Usage) -> bool:
    """Whether the gang's smallest admissible size fits its team's nominal quota beside what the team uses."""
    key = (job.team, job.gpu_type)
    return usage.get(key, 0) + job.min_gpus <= state.tenancy.quota(*key).nominal


def borrowing_teams(state: CellState, job: Job, usage: Usage) -> set[str]:
    """The other teams of the gang's lending pool that use more than their nominal quota of its GPU type."""
    tenancy = state.tenancy
    return {t for t in tenancy.pool_members(job.team)
            if t != job.team and usage.get((t, job.gpu_type), 0) > tenancy.quota(t, job.gpu_type).nominal}


def time_shares(job: Job, victim: Job, time_share: str, now: int) -> bool:
    """Whether `victim` may yield its GPUs to `job` under `time_share`: it has received more GPU-time, by band."""
    return ((time_share == "Any" or (time_share == "WithinTeam" and victim.team == job.team))
            and victim.priority <= job.priority and service_band(victim.attained(now)) > job.service_band)


def category(job: Job, victim: Job, team_rules: Rules, within: bool, borrowing: set[str],
             time_share: str, now: int) -> Reason | None:
    """Why `victim` may make room for `job` (RECLAIM_LENT_QUOTA, HIGHER_PRIORITY or TIME_SHARED), or None when it
    may not."""
    lower = victim.priority < job.priority
    shares = time_shares(job, victim, time_share, now)
    if victim.team == job.team:
        rule = team_rules.within_team
        newer_equal = victim.priority == job.priority and victim.rank_key() > job.rank_key()
        if (rule == PreemptionRule.LOWER_PRIORITY and lower) or (
                rule == PreemptionRule.LOWER_OR_NEWER_EQUAL_PRIORITY and (lower or newer_equal)):
            return Reason.HIGHER_PRIORITY
        return Reason.TIME_SHARED if shares else None
    reclaim = team_rules.reclaim_within_cohort
    if victim.team not in borrowing or not (reclaim == PreemptionRule.ANY
                                            or (reclaim == PreemptionRule.LOWER_PRIORITY and lower)):
        return Reason.TIME_SHARED if shares else None
    if within:
        return Reason.RECLAIM_LENT_QUOTA
    threshold = team_rules.max_priority_threshold
    if (team_rules.borrow_within_cohort == PreemptionRule.LOWER_PRIORITY and lower
            and (threshold is None or victim.priority <= threshold)):
        return Reason.HIGHER_PRIORITY
    return Reason.TIME_SHARED if shares else None


def _lowest_priority(state: CellState) -> int:
    return min([0, *(c.value for c in state.tenancy.priority_classes.values())])


def _may_take_own(team_rules: Rules, job: Job, lowest: int) -> bool:
    """Whether any job of the gang's own team could rank below it under `within_team`."""
    rule = team_rules.within_team
    return ((rule == PreemptionRule.LOWER_PRIORITY and job.priority > lowest)
            or (rule == PreemptionRule.LOWER_OR_NEWER_EQUAL_PRIORITY and job.priority >= lowest))


def _may_take_others(team_rules: Rules, job: Job, within: bool, lowest: int) -> bool:
    """Whether any job of another team that borrows could be a victim for the gang under its rules."""
    reclaim = team_rules.reclaim_within_cohort
    if reclaim == PreemptionRule.NEVER:
        return False
    if within:
        return reclaim == PreemptionRule.ANY or job.priority > lowest
    return team_rules.borrow_within_cohort == PreemptionRule.LOWER_PRIORITY and job.priority > lowest


def _time_share_teams(state: CellState, job: Job, policy: PreemptionPolicy) -> list[str]:
    """The teams whose running jobs may yield GPU-time to `job` under the policy's `time_share`."""
    if policy.time_share == "Any":
        return sorted(state.running_by_team)
    return [job.team] if policy.time_share == "WithinTeam" else []


def may_have_victims(state: CellState, job: Job, policy: PreemptionPolicy, usage: Usage, now: int) -> bool:
    """Cheap test before the search: could any running job be a victim for `job` under its team's rules?"""
    team_rules = rules(state, job.team, policy)
    lowest = _lowest_priority(state)
    if _may_take_own(team_rules, job, lowest):
        return True
    if any(time_shares(job, state.jobs[v], policy.time_share, now)
           for team in _time_share_teams(state, job, policy) for _, v in state.running_by_team.get(team, ())):
        return True
    return (_may_take_others(team_rules, job, within_nominal(state, job, usage), lowest)
            and bool(borrowing_teams(state, job, usage)))


def lost_work_gpu_ms(victim: Job, now: int) -> int:
    """Training a victim loses when it stops now: GPUs times the time since its last checkpoint (or start)."""
    since = victim.running_since or now
    if victim.checkpoint is not None:
        since = max(since, victim.checkpoint.at)
    return victim.held_gpus * max(0, now - since)


def candidates(state: CellState, job: Job, policy: PreemptionPolicy, now: int, usage: Usage,
               memo: dict | None = None) -> list[tuple[tuple, Job]]:
    """Possible victims with their sort key: reclaim before priority, least lost work, biggest first. A job
    already preempted once for this gang is not preempted for it again. `memo` keeps the victims in other teams
    for gangs alike in what they depend on, while neither the state, `now` nor `usage` changes (see `_shared` in
    services/preemptor/decide.py)."""
    team_rules = rules(state, job.team, policy)
    within = within_nominal(state, job, usage)
    lowest = _lowest_priority(state)
    out: list[tuple[tuple, Job]] = []
    borrowing: set[str] = set()
    if policy.time_share == "Any":  # victims in any team, depending on the gang's band too: nothing shared
        borrowing = borrowing_teams(state, job, usage) if _may_take_others(team_rules, job, within, lowest) else set()
        teams = sorted((borrowing | set(_time_share_teams(state, job, policy))) - {job.team})
        out = [c for c in _ranked(state, job, policy, now, teams, team_rules, within, borrowing)
               if job.job_id not in c[1].yielded_to]
    elif _may_take_others(team_rules, job, within, lowest):
        # Victims in other teams depend on the gang only through these (and on whom they yielded to, below).
        key = (job.team, job.gpu_type, job.priority, within, job.held_quota)
        others = memo.get(key) if memo is not None else None
        if others is None:
            borrowing = borrowing_teams(state, job, usage)
            others = _ranked(state, job, policy, now, sorted(borrowing), team_rules, within, borrowing)
            if memo is not None:
                memo[key] = others
        out = [c for c in others if job.job_id not in c[1].yielded_to]
    if _may_take_own(team_rules, job, lowest) or policy.time_share != "Never":
        out += [c for c in _ranked(state, job, policy, now, [job.team], team_rules, within, borrowing)
                if job.job_id not in c[1].yielded_to]
        out.sort(key=lambda c: c[0][1:])
    return out


def _ranked(state: CellState, job: Job, policy: PreemptionPolicy, now: int, teams: list[str], team_rules: Rules,
            within: bool, borrowing: set[str]) -> list[tuple[tuple, Job]]:
    """The running jobs of `teams` that may be victims for `job` (whom they yielded to aside), sorted by their key."""
    out = []
    # Visit order does not matter: the candidates are sorted by a total key below.
    started_by = now - policy.min_runtime_ms  # later starters are protected for their minimum runtime
    for victim_id in [v for t in teams for v in state.running_before(t, started_by)]:
        victim = state.jobs[victim_id]
        if (victim.state not in (JobState.RUNNING, JobState.PLACED) or not victim.preemptible
                or victim.gpu_type != job.gpu_type or victim.job_id == job.job_id):
            continue
        if victim.running_since is None or now - victim.running_since < policy.min_runtime_ms:
            continue  # not running yet, or protected after a (re)start
        reason = category(job, victim, team_rules, within, borrowing, policy.time_share, now)
        if reason is None:
            continue
        # reclaim first, then priority, then time-sharing from the job that has received the most GPU-time
        rank = {Reason.RECLAIM_LENT_QUOTA: 0, Reason.HIGHER_PRIORITY: 1}.get(
            reason, 2 + LAST_BAND - service_band(victim.attained(now)))
        lost = lost_work_gpu_ms(victim, now) if policy.checkpoint_aware else 0
        started = -(victim.running_since or 0)  # without checkpoint awareness: newest first, as Kueue does
        out.append(((reason, rank, lost, started if not policy.checkpoint_aware else 0, -victim.held_gpus,
                     victim.job_id), victim))
    out.sort(key=lambda c: c[0][1:])
    return out


def keeps_nominal(state: CellState, job: Job, victims: list[Job], usage: Usage, law: bool = True) -> bool:
    """Whether every team but the gang's own stays at or above its nominal quota once all `victims` are gone
    (always, without the `law`: PreemptionPolicy.keep_nominal)."""
    if not law:
        return True
    left: Usage = {}
    for victim in victims:
        if victim.team != job.team:
            key = (victim.team, victim.gpu_type)
            left[key] = left.get(key, usage.get(key, 0)) - victim.held_gpus
    return all(gpus >= state.tenancy.quota(*key).nominal for key, gpus in left.items())


def eligible(state: CellState, job: Job, ranked: list[tuple[tuple, Job]], usage: Usage,
             law: bool = True) -> list[Job]:
    """The candidates in order, less each one whose eviction after the earlier ones would take its team below
    its nominal quota: every prefix of the result keeps the law (all of them, without the `law`)."""
    if not law:
        return [victim for _, victim in ranked]
    usage = dict(usage)
    nominal: dict[tuple[str, str], int] = {}
    out = []
    for _, victim in ranked:
        if victim.team == job.team:  # the law bounds other teams' use only
            out.append(victim)
            continue
        key = (victim.team, victim.gpu_type)
        left = usage.get(key, 0) - victim.held_gpus
        if key not in nominal:
            nominal[key] = state.tenancy.quota(*key).nominal
        if left < nominal[key]:
            continue
        out.append(victim)
        usage[key] = left
    return out


def staying(state: CellState, usage: dict[tuple[str, str], int]) -> dict[tuple[str, str], int]:
    """Quota usage less the jobs already being preempted (for any gang): they are leaving, so the law (no other
    team below its nominal) counts only what stays."""
    usage = dict(usage)
    for job_id in sorted(state.preempting):
        leaving = state.jobs[job_id]
        usage[(leaving.team, leaving.gpu_type)] -= leaving.held_gpus
    return usage
