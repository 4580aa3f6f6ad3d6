"""Quota fit, shared by admission and by the preemptor's what-if: how much of a gang its team's quota takes now."""

from __future__ import annotations

from projections.jobs import Job
from projections.tenancy import Admissibility, Tenancy


def quota_fit(tenancy: Tenancy, job: Job, borrowing: bool,
              usage: dict[tuple[str, str], int]) -> tuple[int, Admissibility]:
    """The most workers, from the whole gang down to its min_workers, whose GPUs fit the team's quota."""
    count = job.workers
    fit = tenancy.admissible(job.team, job.gpu_type, job.gpus, borrowing, usage)
    while not fit.fits and job.min_workers is not None and count > job.min_count:
        count -= 1
        fit = tenancy.admissible(job.team, job.gpu_type, count * job.gpus_per_worker, borrowing, usage)
    return count, fit
