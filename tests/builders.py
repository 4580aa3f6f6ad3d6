"""Readable builders for tests: `job("llm", workers=4, gpus=8, team="nlp")` and friends.

Each builder returns an event with a plain envelope; `fold(*events)` plays them through every
decider on a fresh virtual cell, so a test can state a situation in the domain's words.
"""

from __future__ import annotations

from events import models as m
from events.submission import job_submitted
from replay.runner import VirtualCell
from services.policy import DEFAULT_POLICY, Policy

H100 = "H100"


def env(at: int = 0, producer: str = "test", event_id: str | None = None) -> m.Envelope:
    return m.Envelope(event_id=event_id or f"{producer}-{at}", cell="test-cell", at=at, producer=producer)


def topology(*levels: str, at: int = 0) -> m.CellConfigured:
    return m.CellConfigured(envelope=env(at), topology_levels=list(levels))


def node(name: str, gpus: int = 8, gpu_type: str = H100, spare: bool = False, at: int = 0,
         **labels: str) -> m.NodeRegistered:
    return m.NodeRegistered(envelope=env(at), node=name, gpu_type=gpu_type, gpus=gpus, labels=labels, spare=spare)


def team(name: str, cohort: str | None = None, weight: float = 1.0, at: int = 0) -> m.TeamDefined:
    return m.TeamDefined(envelope=env(at), team=name, cohort=cohort, weight_milli=round(weight * 1000))


def quota(team_name: str, nominal: int, gpu_type: str = H100, borrowing_limit: int | None = None,
          lending_limit: int | None = None, at: int = 0) -> m.QuotaSet:
    return m.QuotaSet(envelope=env(at), team=team_name, gpu_type=gpu_type, nominal=nominal,
                      borrowing_limit=borrowing_limit, lending_limit=lending_limit)


def priority(name: str, value: int, preemptible: bool = True, at: int = 0) -> m.PriorityClassDefined:
    return m.PriorityClassDefined(envelope=env(at), name=name, value=value, preemptible=preemptible)


def job(job_id: str, workers: int = 1, gpus: int = 8, team: str = "nlp", gpu_type: str = H100, at: int = 0,
        **fields) -> m.JobSubmitted:
    """A gang of `workers` x `gpus` GPUs; other JobSubmitted fields pass through."""
    return job_submitted(job_id, team, workers, gpus, gpu_type, cell="test-cell", at=at, producer="launcher",
                         event_id=f"submit-{job_id}-{at}", **fields)


def cancel(job_id: str, at: int = 0) -> m.JobCancelRequested:
    return m.JobCancelRequested(envelope=env(at, "launcher", f"cancel-{job_id}-{at}"), job_id=job_id)


def tick(at: int) -> m.Tick:
    return m.Tick(envelope=env(at, "clock"))


def fold(*events: m.Event, policy: Policy = DEFAULT_POLICY) -> VirtualCell:
    """A virtual cell (no agents, no clock beyond the events' own times) after playing `events` in order."""
    cell = VirtualCell(cell="test-cell", policy=policy)
    cell.schedule_all(events)
    cell.run_until(max((e.envelope.at for e in events), default=0))
    return cell
