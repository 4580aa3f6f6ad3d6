"""The whole state of one cell, folded from its log: cluster, tenancy, jobs and heartbeats."""

from __future__ import annotations

from dataclasses import dataclass, field

from projections.cluster import Cluster
from projections.jobs import Job, JobState
from projections.tenancy import Tenancy


@dataclass
class CellState:
    """Everything a decider may look at. `offset` is the log position of the last folded event."""

    cell: str = ""
    offset: int = -1
    now: int = 0
    cluster: Cluster = field(default_factory=Cluster)
    tenancy: Tenancy = field(default_factory=Tenancy)
    jobs: dict[str, Job] = field(default_factory=dict)
    queued: set[str] = field(default_factory=set)  # job ids in state QUEUED
    admitted: set[str] = field(default_factory=set)  # job ids admitted but not yet placed
    holding: set[str] = field(default_factory=set)  # job ids holding GPUs or quota
    preempting: set[str] = field(default_factory=set)  # job ids asked to checkpoint and make room
    holding_by_team: dict[str, set[str]] = field(default_factory=dict)
    last_heartbeat: dict[str, int] = field(default_factory=dict)
    reservations: dict[str, tuple[str, ...]] = field(default_factory=dict)  # queued job -> nodes draining for it
    #: keys of the snapshot rows changed since a store last saved them (see projections/snapshot.py)
    dirty: set[str] = field(default_factory=set, compare=False, repr=False)

    def job(self, job_id: str) -> Job | None:
        return self.jobs.get(job_id)

    def jobs_in(self, *states: JobState) -> list[Job]:
        return [self.jobs[j] for j in sorted(self.jobs) if self.jobs[j].state in states]

    def set_state(self, job: Job, state: JobState) -> None:
        """Moves a job to a new state, keeping the queued / admitted / holding indexes in step."""
        job.state = state
        for index, member in ((self.queued, state is JobState.QUEUED),
                              (self.admitted, state is JobState.ADMITTED),
                              (self.preempting, state is JobState.PREEMPTING),
                              (self.holding, job.holds_capacity)):
            if member:
                index.add(job.job_id)
            else:
                index.discard(job.job_id)
        team = self.holding_by_team.setdefault(job.team, set())
        if job.holds_capacity:
            team.add(job.job_id)
        else:
            team.discard(job.job_id)
