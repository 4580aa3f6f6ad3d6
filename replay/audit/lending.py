"""Who lends to whom. The log records how much a team borrowed (JobAdmitted.borrowed), not from whom: a cohort
pools what its teams may lend. Gangway attributes borrowed GPUs to the lenders in proportion to what each had
idle to lend at that moment (its lendable nominal it was not using itself), largest remainder first, ties by
team name. `explain` (borrowed from whom) and `report` (GPU-hours lent) use this one rule."""

from __future__ import annotations

from collections.abc import Mapping

from projections.tenancy import Tenancy


def idle_lendable(tenancy: Tenancy, team: str, gpu_type: str,
                  usage: Mapping[tuple[str, str], int] | None = None) -> int:
    """GPUs of `team`'s lendable nominal it is not using itself."""
    usage = tenancy.usage if usage is None else usage
    quota = tenancy.quota(team, gpu_type)
    used = usage.get((team, gpu_type), 0)
    return max(0, quota.nominal - max(used, quota.guaranteed)) if quota.lendable else 0


def lenders(tenancy: Tenancy, team: str, gpu_type: str, amount: int,
            usage: Mapping[tuple[str, str], int] | None = None) -> dict[str, int]:
    """`amount` borrowed GPUs of `team` split over the other teams of its pool by what they have idle to lend."""
    weights = {other: idle_lendable(tenancy, other, gpu_type, usage)
               for other in tenancy.pool_members(team) if other != team}
    return split(amount, weights)


def split(amount: int, weights: Mapping[str, int]) -> dict[str, int]:
    """`amount` in whole units, proportional to `weights` (largest remainder, ties by name); {} without weight."""
    total = sum(w for w in weights.values() if w > 0)
    if amount <= 0 or total <= 0:
        return {}
    shares = {k: divmod(amount * w, total) for k, w in sorted(weights.items()) if w > 0}
    out = {k: q for k, (q, _) in shares.items()}
    for k in sorted(shares, key=lambda k: (-shares[k][1], k))[:amount - sum(out.values())]:
        out[k] += 1
    return {k: v for k, v in out.items() if v}


def lent_now(tenancy: Tenancy, gpu_type: str) -> dict[str, int]:
    """Per team, GPUs of its nominal others borrow right now: each pool's borrowed GPUs split over its lenders."""
    out: dict[str, int] = {}
    seen: set[str] = set()
    for team in sorted(tenancy.teams):
        if team in seen:
            continue
        pool = tenancy.pool_members(team)
        seen.update(pool)
        borrowed = sum(tenancy.borrowed(t, gpu_type) for t in pool)
        for lender, gpus in split(borrowed, {t: idle_lendable(tenancy, t, gpu_type) for t in pool}).items():
            out[lender] = out.get(lender, 0) + gpus
    return out
