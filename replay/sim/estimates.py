"""How good are the queue's estimated starts? While a simulation plays, each waiting job's estimate
(services/core/forecast.py, under the run's policy) is recorded when it is submitted and whenever its position
in the cell's admission order changes, and later held against the time it really started (its next admission).

Estimates are taken once per instant of event time, after every event of that instant is folded: an admission
cycle moves many positions at once, and the estimate a user would read is the one after the cycle.

The result (the sim's JSON `estimates`): for every estimate, and for the one each job got at submission (also
only for jobs that really waited), the share whose actual start fell inside the estimate's interval [earliest,
latest], the shares that started before or after it, the median and 90th-percentile absolute error of the
estimated start, its median signed error (actual - estimated: positive when jobs start later than estimated),
and the median width of the interval; estimates without a start (`unknown`) count as outside.
"""

from __future__ import annotations

from array import array
from collections import Counter
from dataclasses import dataclass, field

from events import models as m
from projections.cell import CellState
from services.core.forecast import forecast
from services.core.queue import queue_order
from services.policy import Policy

#: Events after which positions in the queue may have changed.
_MOVES = frozenset({m.JobSubmitted, m.JobAdmitted, m.JobQueued, m.PlacementPending, m.JobPreempted, m.JobRequeued,
                    m.JobCancelled, m.JobRejected, m.JobSucceeded, m.JobFailed, m.JobInterrupted, m.QuotaSet})


@dataclass
class _Tally:
    """Estimates held against actual starts."""

    count: int = 0
    unknown: int = 0  # estimates without a start
    unknown_why: Counter = field(default_factory=Counter)  # their basis: why there is none
    inside: int = 0
    early: int = 0  # started before the interval
    late: int = 0  # started after it
    errors_ms: array = field(default_factory=lambda: array("q"))  # actual - estimated start (late: positive)
    widths_ms: array = field(default_factory=lambda: array("q"))

    def add(self, start: int | None, earliest: int | None, latest: int | None, actual: int, basis: str) -> None:
        self.count += 1
        if start is None or earliest is None or latest is None:
            self.unknown += 1
            self.unknown_why[basis] += 1
            return
        self.errors_ms.append(actual - start)
        self.widths_ms.append(latest - earliest)
        if actual < earliest:
            self.early += 1
        elif actual > latest:
            self.late += 1
        else:
            self.inside += 1

    def summary(self) -> dict:
        def median(values, q: float = 0.5) -> float | None:
            if not values:
                return None
            ordered = sorted(values)
            return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1000, 1)
        share = (lambda n: round(n / self.count, 4)) if self.count else (lambda n: None)
        absolute = [abs(e) for e in self.errors_ms]
        return {"estimates": self.count, "inside_share": share(self.inside), "early_share": share(self.early),
                "late_share": share(self.late), "unknown_share": share(self.unknown),
                "unknown_by_basis": {basis: share(n) for basis, n in sorted(self.unknown_why.items())},
                "median_abs_error_s": median(absolute), "p90_abs_error_s": median(absolute, 0.9),
                "median_error_s": median(self.errors_ms), "median_interval_s": median(self.widths_ms)}


class EstimateRecorder:
    """Observer of a virtual cell that records estimates as positions change and scores them at the start."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.instant: int | None = None  # event time of the events folded since the last look
        self.moved = False
        self.positions: dict[str, int] = {}  # job -> cell position when last recorded
        self.pending: dict[str, list[tuple[int, int | None, int | None, int | None, str, bool]]] = {}
        self.submitted_at: dict[str, int] = {}
        self.all, self.at_submission, self.waited = _Tally(), _Tally(), _Tally()
        self.forecasts = 0

    def __call__(self, cell, event: m.Event, offset: int) -> None:
        at = event.envelope.at
        if self.instant is not None and at > self.instant and self.moved:
            self.look(cell.state)
        self.instant = at
        kind = type(event)
        if kind not in _MOVES:
            return
        self.moved = True
        if kind is m.JobAdmitted:
            job = cell.state.jobs.get(event.job_id)
            if job is not None and job.reason_offset == offset:  # folded: the job started
                self._started(job.job_id, at)
        elif kind in (m.JobCancelled, m.JobRejected, m.JobFailed):
            self.pending.pop(event.job_id, None)
            self.positions.pop(event.job_id, None)

    def look(self, state: CellState) -> None:
        """Records the estimate of every queued job that is new to the queue or has moved in it."""
        self.moved = False
        admission = self.policy.admission
        order = queue_order(state, [state.jobs[j] for j in sorted(state.queued)], admission)
        if all(self.positions.get(job.job_id) == i for i, job in enumerate(order, 1)) and len(
                self.positions) == len(state.queued):
            return  # nobody moved
        estimates = forecast(state, self.policy)
        self.forecasts += 1
        for job_id, e in estimates.items():
            if self.positions.get(job_id) == e.cell_position:
                continue
            first = job_id not in self.positions and job_id not in self.submitted_at
            if first:
                self.submitted_at[job_id] = state.now
            self.positions[job_id] = e.cell_position
            self.pending.setdefault(job_id, []).append((state.now, e.start, e.earliest, e.latest, str(e.basis), first))
        for job_id in [j for j in self.positions if j not in estimates]:
            del self.positions[job_id]

    def _started(self, job_id: str, at: int) -> None:
        self.positions.pop(job_id, None)
        for recorded_at, start, earliest, latest, basis, first in self.pending.pop(job_id, ()):
            self.all.add(start, earliest, latest, at, basis)
            if first:
                self.at_submission.add(start, earliest, latest, at, basis)
                if at > recorded_at:
                    self.waited.add(start, earliest, latest, at, basis)

    def summary(self) -> dict:
        return {"policy": self.policy.version, "forecasts": self.forecasts,
                "never_started": sum(1 for v in self.pending.values() if v),
                "all": self.all.summary(), "at_submission": self.at_submission.summary(),
                "at_submission_waited": self.waited.summary()}
