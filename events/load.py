"""A workload from job traces as plain data: the teams, their quotas and the timed `JobSubmitted` events."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from events import models as m
from events.submission import job_submitted
from events.traces import TraceRow, gang_shape

PRODUCER = "load"
# Each trace file is one team (its stem: `cluster04`, `philly_103959`) and teams are spread over the cells in
# name order. A job's id is its file and row (`cluster04-17`), so submitting the same slice again is rejected
# as duplicates by the admitter. Its gang shape comes from `gang_shape`, its training time goes in the
# `duration_ms` label for the fleet, and its event time is the trace time compressed onto the virtual clock.


@dataclass(frozen=True)
class Slice:
    """The part of the traces to play: from `start_s` (default: the first job), at most `limit` jobs,
    none larger than `max_gpus`."""

    start_s: int | None = None
    limit: int | None = None
    max_gpus: int | None = None


def select(rows: Sequence[TraceRow], part: Slice) -> tuple[list[TraceRow], int]:
    """The rows of the slice, in submission order, and how many were left out for being too large."""
    chosen, too_large = [], 0
    for row in rows:
        if part.limit is not None and len(chosen) >= part.limit:
            break
        if part.start_s is not None and row.submit_s < part.start_s:
            continue
        if part.max_gpus is not None and row.gpus > part.max_gpus:
            too_large += 1
            continue
        chosen.append(row)
    return chosen, too_large


def team_cells(rows: Sequence[TraceRow], cells: Sequence[str]) -> dict[str, str]:
    """Each team (trace file) to one cell, round robin in name order."""
    teams = sorted({row.cluster for row in rows})
    return {team: cells[i % len(cells)] for i, team in enumerate(teams)}


def quota_shares(weights: dict[str, float], total: int) -> dict[str, int]:
    """`total` split in proportion to `weights`, in whole GPUs that add up to `total` (largest remainder)."""
    whole = sum(weights.values())
    if whole <= 0:
        return dict.fromkeys(weights, 0)
    exact = {team: total * w / whole for team, w in weights.items()}
    shares = {team: int(x) for team, x in exact.items()}
    by_remainder = sorted(exact, key=lambda t: (-(exact[t] - shares[t]), t))
    for team in by_remainder[: total - sum(shares.values())]:
        shares[team] += 1
    return shares


def team_events(rows: Sequence[TraceRow], cells: Sequence[str], gpus: int, gpu_type: str, cohort: str,
                at: int) -> list[m.Event]:
    """A cohort per cell, a team per trace file in it, and each team's nominal quota: its share of the
    cell's `gpus` in proportion to its GPU-hours in the slice (borrowing and lending unlimited)."""
    homes = team_cells(rows, cells)
    events: list[m.Event] = []
    for cell in cells:
        teams = sorted(t for t, c in homes.items() if c == cell)
        if not teams:
            continue
        hours = {t: sum(r.gpus * r.duration_s for r in rows if r.cluster == t) / 3600 for t in teams}
        shares = quota_shares(hours, gpus)
        envelope = lambda what: m.Envelope(event_id=f"{PRODUCER}/{cell}/{what}", cell=cell, at=at,  # noqa: E731
                                           producer=PRODUCER)
        events.append(m.CohortDefined(envelope=envelope(f"cohort-{cohort}"), cohort=cohort))
        for team in teams:
            events.append(m.TeamDefined(envelope=envelope(f"team-{team}"), team=team, cohort=cohort))
            events.append(m.QuotaSet(envelope=envelope(f"quota-{team}-{gpu_type}"), team=team, gpu_type=gpu_type,
                                     nominal=shares[team]))
    return events


def submissions(rows: Sequence[TraceRow], cells: Sequence[str], origin_ms: int, start_s: int | None = None,
                gpu_type: str = "H100", gpus_per_node: int = 8, compress: float = 1.0) -> list[m.JobSubmitted]:
    """One `JobSubmitted` per row at `origin_ms` + its trace seconds after the slice's start, in time order.
    `compress` divides both the gaps between submissions and the durations, so the slice plays faster
    while the cell sees the same offered load (arrival rate times duration)."""
    if not rows:
        return []
    homes = team_cells(rows, cells)
    t0 = start_s if start_s is not None else rows[0].submit_s
    out = []
    for row in rows:
        job_id = f"{row.cluster}-{row.row}"
        workers, per_worker = gang_shape(row.gpus, gpus_per_node)
        out.append(job_submitted(job_id, row.cluster, workers, per_worker, gpu_type, cell=homes[row.cluster],
                                 at=origin_ms + int((row.submit_s - t0) * 1000 / compress), producer=PRODUCER,
                                 event_id=f"{PRODUCER}/{job_id}",
                                 labels={"duration_ms": str(int(row.duration_s * 1000 / compress))}))
    return out
