"""Teams, cohorts, quotas and priority classes, and the quota arithmetic of lending and borrowing.

The model is Kueue's: per team and GPU type a nominal quota, a borrowing limit and a lending
limit. A cohort pools what its teams may lend; a team's usage above the part of its nominal it
keeps for itself (nominal - lending limit) draws on that pool. Nested cohorts share one pool at
their root, so any two teams under the same root cohort lend to each other.

Who lends to whom is not recorded (an admission records only how much it borrowed): borrowed GPUs are
attributed to the pool's lenders in proportion to what each has idle to lend, largest remainders first and
ties by name (`lenders`, `lent`). The read model, the launcher and the audit commands all count it this way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from projections.pooled import PooledUsage
from projections.value import Value

if TYPE_CHECKING:
    from projections.jobs import Job


@dataclass(frozen=True)
class Quota(Value):
    nominal: int = 0
    borrowing_limit: int | None = None  # None: may borrow without limit
    lending_limit: int | None = None  # None: may lend all of its nominal
    #: what it may lend, and the part of the nominal that is never lent (read by every quota check)
    lendable: int = field(init=False, repr=False, compare=False)
    guaranteed: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        lendable = self.nominal if self.lending_limit is None else min(self.lending_limit, self.nominal)
        object.__setattr__(self, "lendable", lendable)
        object.__setattr__(self, "guaranteed", self.nominal - lendable)


@dataclass(frozen=True)
class TeamPreemption(Value):
    """A team's own preemption rules (TeamDefined; Kueue's ClusterQueue `preemption`); None: the policy's default."""

    within_team: str | None = None
    reclaim_within_cohort: str | None = None
    borrow_within_cohort: str | None = None
    max_priority_threshold: int | None = None


@dataclass(frozen=True)
class Team(Value):
    name: str
    cohort: str | None
    weight_milli: int = 1000
    preemption: TeamPreemption = TeamPreemption()


@dataclass(frozen=True)
class PriorityClass(Value):
    name: str
    value: int
    preemptible: bool


DEFAULT_PRIORITY = PriorityClass("default", 0, True)

#: The quota of a (team, GPU type) that has none set (immutable, so one instance serves every lookup).
NO_QUOTA = Quota()


@dataclass(frozen=True)
class Admissibility(Value):
    """Whether `gpus` more fit a team's quota now, how many would be borrowed, and if not, why."""

    fits: bool
    borrowed: int = 0
    limit: str = ""  # "nominal", "borrowing_limit" or "cohort" when it does not fit


@dataclass
class Tenancy:
    """Quota configuration plus current usage per (team, GPU type)."""

    teams: dict[str, Team] = field(default_factory=dict)
    cohort_parent: dict[str, str | None] = field(default_factory=dict)
    quotas: dict[tuple[str, str], Quota] = field(default_factory=dict)
    priority_classes: dict[str, PriorityClass] = field(default_factory=dict)
    usage: dict[tuple[str, str], int] = field(default_factory=dict)
    #: quota held for waiting gangs (CapacityHeld), per (team, GPU type): no other gang may take it
    held: dict[tuple[str, str], int] = field(default_factory=dict)
    #: memo of pool members and pool sizes; evolve calls `configuration_changed` to clear it
    _pools: dict[str, list[str]] = field(default_factory=dict, repr=False, compare=False)
    _pool_sizes: dict[tuple[str, str], int] = field(default_factory=dict, repr=False, compare=False)
    _pool_guaranteed: dict[tuple[str, str], list] = field(default_factory=dict, repr=False, compare=False)
    _pool_nominal: dict[tuple[str, str], int] = field(default_factory=dict, repr=False, compare=False)
    #: counts the changes of configuration and usage, so a reader can tell cheaply whether either changed
    changes: int = field(default=0, repr=False, compare=False)

    def configuration_changed(self) -> None:
        self.changes += 1
        self._pools.clear()
        self._pool_sizes.clear()
        self._pool_guaranteed.clear()
        self._pool_nominal.clear()

    def root_cohort(self, cohort: str | None) -> str | None:
        seen = set()
        while cohort is not None and self.cohort_parent.get(cohort) is not None and cohort not in seen:
            seen.add(cohort)
            cohort = self.cohort_parent[cohort]
        return cohort

    def pool_members(self, team: str) -> list[str]:
        """Teams sharing a lending pool with `team` (itself included), sorted."""
        members = self._pools.get(team)
        if members is None:
            root = self.root_cohort(self.teams[team].cohort) if team in self.teams else None
            members = [team] if root is None else sorted(
                t for t, spec in self.teams.items() if self.root_cohort(spec.cohort) == root)
            self._pools[team] = members
        return members

    def use(self, key: tuple[str, str], gpus: int) -> None:
        """`gpus` more (or fewer, when negative) in use by a team's jobs of a GPU type."""
        self.usage[key] = self.usage.get(key, 0) + gpus
        self.changes += 1

    def committed(self, except_job: Job | None = None) -> dict[tuple[str, str], int]:
        """Quota usage with the holds for waiting gangs added, less `except_job`'s own hold (a Job): what every
        other gang's admission must fit beside."""
        if not self.held:
            return self.usage
        usage = dict(self.usage)
        for key, held in self.held.items():
            usage[key] = usage.get(key, 0) + held
        if except_job is not None and except_job.held_quota:
            key = (except_job.team, except_job.gpu_type)
            usage[key] -= except_job.held_quota
        return usage

    def quota(self, team: str, gpu_type: str) -> Quota:
        return self.quotas.get((team, gpu_type), NO_QUOTA)

    def used(self, team: str, gpu_type: str) -> int:
        return self.usage.get((team, gpu_type), 0)

    def pool_size(self, team: str, gpu_type: str) -> int:
        size = self._pool_sizes.get((team, gpu_type))
        if size is None:
            size = self._pool_sizes[(team, gpu_type)] = sum(
                self.quota(t, gpu_type).lendable for t in self.pool_members(team))
        return size

    def pool_used(self, team: str, gpu_type: str, usage: dict[tuple[str, str], int] | None = None) -> int:
        usage = self.usage if usage is None else usage
        if type(usage) is PooledUsage:
            pool = ((self._pools.get(team) or self.pool_members(team))[0], gpu_type)  # its first member names it
            used = usage.pools.get(pool)
            if used is None:
                used = usage.pools[pool] = self._pool_used(team, gpu_type, usage)
            return used
        return self._pool_used(team, gpu_type, usage)

    def _pool_used(self, team: str, gpu_type: str, usage: dict[tuple[str, str], int]) -> int:
        guaranteed = self._pool_guaranteed.get((team, gpu_type))
        if guaranteed is None:
            guaranteed = self._pool_guaranteed[(team, gpu_type)] = [
                ((t, gpu_type), self.quota(t, gpu_type).guaranteed) for t in self.pool_members(team)]
        used = 0
        for key, kept in guaranteed:  # a plain loop: this runs for every quota check
            over = usage.get(key, 0) - kept
            if over > 0:
                used += over
        return used

    def admissible(self, team: str, gpu_type: str, gpus: int, borrowing: bool = True,
                   usage: dict[tuple[str, str], int] | None = None) -> Admissibility:
        """Quota check for `gpus` more GPUs, against `usage` (default: the folded usage)."""
        usage = self.usage if usage is None else usage
        key = (team, gpu_type)
        quota = self.quotas.get(key, NO_QUOTA)
        used = usage.get(key, 0)
        after = used + gpus
        borrowed = after - quota.nominal  # conditionals, not max(): this runs for every quota check
        if borrowed < 0:
            borrowed = 0
        member = self.teams.get(team)
        cohort = member.cohort if member is not None else None
        if borrowed and (not borrowing or cohort is None):  # a team without a cohort has nothing to borrow from
            return _answer(False, borrowed, "nominal")
        if quota.borrowing_limit is not None and borrowed > quota.borrowing_limit:
            return _answer(False, borrowed, "borrowing_limit")
        # What the request adds to the pool's use, less what it leaves unused of the part its team keeps: negative
        # for a request inside that part, which a pool overdrawn (a lending limit or a nominal lowered under
        # borrowers) must still grant as far as the overdraft allows (Kueue: the unused guaranteed quota plus the
        # cohort's headroom, which may be negative).
        kept = quota.guaranteed
        over_before = used - kept
        own_extra = after - kept - (over_before if over_before > 0 else 0)
        size = self._pool_sizes.get(key)
        if self.pool_used(team, gpu_type, usage) + own_extra > (self.pool_size(team, gpu_type) if size is None else size):
            return _answer(False, borrowed, "cohort" if borrowed else "reclaim")
        return _answer(True, borrowed, "")

    def borrowed(self, team: str, gpu_type: str) -> int:
        return max(0, self.used(team, gpu_type) - self.quota(team, gpu_type).nominal)

    def dominant_share_milli(self, team: str, usage: dict[tuple[str, str], int] | None = None) -> int:
        """Weighted dominant share: max over GPU types of usage / pool nominal, per weight, in thousandths."""
        usage = self.usage if usage is None else usage
        weight = max(self.teams[team].weight_milli if team in self.teams else 1000, 1)
        share = 0
        for (t, gpu_type), used in usage.items():  # a maximum: any order gives it
            if t != team or used == 0:
                continue
            share = max(share, used * 1_000_000 // (self.pool_nominal(team, gpu_type) * weight))
        return share

    def pool_nominal(self, team: str, gpu_type: str) -> int:
        """The nominal quotas of a GPU type summed over `team`'s lending pool (at least 1: a share's divisor)."""
        total = self._pool_nominal.get((team, gpu_type))
        if total is None:
            total = self._pool_nominal[(team, gpu_type)] = sum(
                self.quota(m, gpu_type).nominal for m in self.pool_members(team)) or 1
        return total

    def idle_lendable(self, team: str, gpu_type: str, usage: Mapping[tuple[str, str], int] | None = None) -> int:
        """GPUs of `team`'s lendable nominal it is not using itself."""
        usage = self.usage if usage is None else usage
        quota = self.quota(team, gpu_type)
        return max(0, min(quota.lendable, quota.nominal - usage.get((team, gpu_type), 0)))

    def lenders(self, team: str, gpu_type: str, amount: int,
                usage: Mapping[tuple[str, str], int] | None = None) -> dict[str, int]:
        """`amount` GPUs borrowed by `team`, attributed to the other teams of its pool (see the module's doc)."""
        return split(amount, {other: self.idle_lendable(other, gpu_type, usage)
                              for other in self.pool_members(team) if other != team})

    def lent(self, gpu_type: str) -> dict[str, int]:
        """Per team, GPUs of its nominal that borrowers of its pool use now (see the module's doc)."""
        out: dict[str, int] = {}
        for members in sorted({tuple(self.pool_members(name)) for name in self.teams}):
            borrowed = sum(self.borrowed(name, gpu_type) for name in members)
            out.update(split(borrowed, {name: self.idle_lendable(name, gpu_type) for name in members}))
        return out


_ANSWERS: dict[tuple[bool, int, str], Admissibility] = {}
_MOST_ANSWERS = 4096


def _answer(fits: bool, borrowed: int, limit: str) -> Admissibility:
    """One shared (immutable) Admissibility per distinct answer: quota checks run millions of times a run."""
    key = (fits, borrowed, limit)
    answer = _ANSWERS.get(key)
    if answer is None:
        answer = Admissibility(fits, borrowed, limit)
        if len(_ANSWERS) < _MOST_ANSWERS:  # bounded: a hostile quota could ask for any number of distinct answers
            _ANSWERS[key] = answer
    return answer


def split(amount: int, weights: Mapping[str, int]) -> dict[str, int]:
    """Up to `amount` whole units shared in proportion to `weights`, each at most its weight (largest remainders
    first, ties by name); only the names that get some."""
    total = sum(w for w in weights.values() if w > 0)
    amount = min(amount, total)
    if amount <= 0:
        return {}
    shares = {k: divmod(amount * w, total) for k, w in sorted(weights.items()) if w > 0}
    out = {k: q for k, (q, _) in shares.items()}
    for k in sorted(shares, key=lambda k: (-shares[k][1], k))[:amount - sum(out.values())]:
        out[k] += 1
    return {k: v for k, v in out.items() if v}
