"""The fair-share ledger, folded from a cell's log: per team, GPU-hours used, borrowed and lent, preemptions
suffered and caused, and how long its jobs waited to start.

GPU-hours integrate the quota a team holds (admitted gangs' GPUs) between events: `used`, the part above its
nominal (`borrowed`), the part of its nominal that other teams borrowed (`lent`, attributed by
projections/tenancy.py), and `nominal` itself for scale. Preemptions count JobPreempted decisions in the
window: `suffered` by the team's jobs (with the GPU-hours they had trained since their last checkpoint, which
are lost), `caused` by its jobs (the job a victim made room for). A wait runs from a submission to the job's
first admission; percentiles are over the jobs submitted in the window that started by its end.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field

from events import models as m
from projections.cell import CellState
from projections.evolve import evolve
from replay.audit.text import clock, table
from replay.audit.timeline import lost_gpu_ms
from replay.sim.metrics import percentile

HOUR_MS = 3_600_000


@dataclass
class TeamLedger:
    team: str
    gpu_hours_used: float = 0.0
    gpu_hours_nominal: float = 0.0
    gpu_hours_borrowed: float = 0.0
    gpu_hours_lent: float = 0.0
    preemptions_suffered: int = 0
    gpu_hours_lost_to_preemption: float = 0.0
    preemptions_caused: int = 0
    interruptions: int = 0
    jobs_submitted: int = 0
    jobs_started: int = 0
    jobs_succeeded: int = 0
    still_waiting: int = 0
    wait_s: dict[str, float | None] = field(default_factory=dict)  # p50, p90, p99, max over the jobs started


@dataclass
class Ledger:
    start: int
    end: int
    teams: dict[str, TeamLedger]

    def only(self, names: Iterable[str]) -> Ledger:
        return Ledger(self.start, self.end, {t: self.teams[t] for t in sorted(set(names))})

    def as_json(self) -> dict:
        return {"from": self.start, "to": self.end, "teams": {t: asdict(v) for t, v in self.teams.items()}}


@dataclass
class _Rates:
    """GPUs per team held, held above nominal, nominal, and lent, since the last event."""

    used: dict[str, int] = field(default_factory=dict)
    borrowed: dict[str, int] = field(default_factory=dict)
    nominal: dict[str, int] = field(default_factory=dict)
    lent: dict[str, int] = field(default_factory=dict)


def fold(records: Sequence[tuple[int, m.Event]], start: int | None = None) -> Ledger:
    """The ledger of the records' time span, from `start` (event time; default: the first record's)."""
    state = CellState(tracks_rows=False)
    first = records[0][1].envelope.at if records else 0
    start = first if start is None else start
    end = max(start, state.now)
    teams: dict[str, TeamLedger] = {}
    rates = _Rates()
    submitted: dict[str, int] = {}  # job -> submission time, for jobs submitted in the window not yet admitted
    waits: dict[str, list[int]] = {}
    last = first
    changes = state.tenancy.changes
    for offset, event in records:
        at = event.envelope.at
        if at > last:
            _accrue(teams, rates, max(last, start), at)
            last = at
        job = state.jobs.get(m.field_of(event, "job_id", "")) if isinstance(event, _WATCHED) else None
        before = {"running_since": job.running_since, "checkpoint": job.checkpoint,
                  "held_gpus": job.held_gpus} if job is not None else {}
        if evolve(state, event, offset) is not None:
            continue
        if state.tenancy.changes != changes:  # teams are defined and usage changes only with these
            for team in state.tenancy.teams:
                if team not in teams:
                    teams[team] = TeamLedger(team)
            rates = _rates(state)
            changes = state.tenancy.changes
        if at >= start and type(event) in _COUNTED:
            _count(state, event, offset, before, teams, submitted, waits)
        end = max(end, state.now)
    _accrue(teams, rates, max(last, start), end)
    for team, ledger in teams.items():
        ledger.wait_s = _percentiles(sorted(waits.get(team, [])))
        ledger.still_waiting = sum(1 for j in submitted if j in state.queued and state.jobs[j].team == team)
    return Ledger(start, end, dict(sorted(teams.items())))


def _count(state: CellState, event: m.Event, offset: int, before: dict, teams: dict[str, TeamLedger],
           submitted: dict[str, int], waits: dict[str, list[int]]) -> None:
    job = state.jobs.get(m.field_of(event, "job_id", ""))
    if job is None:
        return
    ledger = teams.setdefault(job.team, TeamLedger(job.team))
    decided = job.reason_offset == offset  # folded, not superseded
    if isinstance(event, m.JobSubmitted) and job.submit_offset == offset:
        ledger.jobs_submitted += 1
        submitted[job.job_id] = job.submitted_at
    elif isinstance(event, m.JobAdmitted) and decided and job.job_id in submitted:
        waits.setdefault(job.team, []).append(job.admitted_at - submitted.pop(job.job_id))
        ledger.jobs_started += 1
    elif isinstance(event, m.JobPreempted) and decided:
        ledger.preemptions_suffered += 1
        ledger.gpu_hours_lost_to_preemption += lost_gpu_ms(before, event.envelope.at) / HOUR_MS
        beneficiary = state.jobs.get(event.for_job_id)
        if beneficiary is not None:
            teams.setdefault(beneficiary.team, TeamLedger(beneficiary.team)).preemptions_caused += 1
    elif isinstance(event, m.JobInterrupted) and decided:
        ledger.interruptions += 1
    elif isinstance(event, m.JobSucceeded) and decided:
        ledger.jobs_succeeded += 1


def _rates(state: CellState) -> _Rates:
    tenancy = state.tenancy
    rates = _Rates()
    for (team, gpu_type), quota in tenancy.quotas.items():
        rates.nominal[team] = rates.nominal.get(team, 0) + quota.nominal
    for (team, gpu_type), used in tenancy.usage.items():
        rates.used[team] = rates.used.get(team, 0) + used
        rates.borrowed[team] = rates.borrowed.get(team, 0) + tenancy.borrowed(team, gpu_type)
    for gpu_type in sorted({t for _, t in tenancy.usage}):
        for team, gpus in tenancy.lent(gpu_type).items():
            rates.lent[team] = rates.lent.get(team, 0) + gpus
    return rates


def _accrue(teams: dict[str, TeamLedger], rates: _Rates, since: int, until: int) -> None:
    if until <= since:
        return
    hours = (until - since) / HOUR_MS
    for team, ledger in teams.items():
        ledger.gpu_hours_used += rates.used.get(team, 0) * hours
        ledger.gpu_hours_borrowed += rates.borrowed.get(team, 0) * hours
        ledger.gpu_hours_nominal += rates.nominal.get(team, 0) * hours
        ledger.gpu_hours_lent += rates.lent.get(team, 0) * hours


def _percentiles(waits_ms: list[int]) -> dict[str, float | None]:
    if not waits_ms:
        return {"p50": None, "p90": None, "p99": None, "max": None}
    return {f"p{p}" if p < 100 else "max": round(percentile(waits_ms, p) / 1000, 1) for p in (50, 90, 99, 100)}


_WATCHED = (m.JobPreempted,)
#: The events `_count` counts.
_COUNTED = frozenset({m.JobSubmitted, m.JobAdmitted, m.JobPreempted, m.JobInterrupted, m.JobSucceeded})


def render(ledger: Ledger) -> str:
    head = f"fair-share ledger from {clock(ledger.start)} to {clock(ledger.end)} (GPU-hours; waits in seconds)"
    rows = []
    for t in ledger.teams.values():
        w = t.wait_s
        rows.append([t.team, f"{t.gpu_hours_nominal:,.1f}", f"{t.gpu_hours_used:,.1f}", f"{t.gpu_hours_borrowed:,.1f}",
                     f"{t.gpu_hours_lent:,.1f}", str(t.preemptions_suffered), f"{t.gpu_hours_lost_to_preemption:,.2f}",
                     str(t.preemptions_caused), str(t.interruptions), str(t.jobs_submitted), str(t.jobs_started),
                     str(t.still_waiting), *[_s(w.get(p)) for p in ("p50", "p90", "p99", "max")]])
    return head + "\n" + table(rows, ["TEAM", "NOMINAL", "USED", "BORROWED", "LENT", "PREEMPTED", "LOST", "CAUSED",
                                      "INTERRUPTED", "SUBMITTED", "STARTED", "WAITING", "WAIT P50", "P90", "P99",
                                      "MAX"])


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"
