"""Documents become events: a Job a `JobSubmitted` (through the one builder, events/submission.py), a Team
its `TeamDefined` and one `QuotaSet` per GPU type, a Cohort a `CohortDefined`, a PriorityClass a
`PriorityClassDefined`; plus the operator's requests (cancel, cordon). Pure: the caller gives the time.

A submission's event id is derived from the job id and the spec's digest, so the same submission
sent twice is the same event, and a different spec under the same id is visibly another."""

from __future__ import annotations

import hashlib
import json

from events import models as m
from events.launcher.spec import Cohort, Document, Job, PriorityClass, Team
from events.submission import job_submitted

#: The order in which `apply` writes documents, so each names only what is already defined.
APPLY_ORDER = (Cohort, PriorityClass, Team)


def submission(job: Job, job_id: str, cell: str, at: int, producer: str = "launcher") -> m.JobSubmitted:
    """The `JobSubmitted` for a job document under `job_id`."""
    spec = job.spec
    event = job_submitted(
        job_id, job.metadata.team, spec.workers, spec.gpus_per_worker, spec.gpu_type, cell=cell, at=at,
        producer=producer, event_id="-", priority_class=spec.priority_class, min_workers=spec.min_workers,
        topology_required=spec.topology.required, topology_preferred=spec.topology.preferred,
        time_limit_ms=spec.time_limit, max_restarts=spec.restart_budget, labels=job.metadata.labels,
        command=[*spec.command, *spec.args], env=spec.env, working_dir=spec.working_dir,
        checkpoint_dir=spec.checkpoint_dir)
    envelope = event.envelope.model_copy(update={"event_id": f"{producer}/{job_id}/{spec_digest(event)}"})
    return event.model_copy(update={"envelope": envelope})


def spec_digest(event: m.JobSubmitted) -> str:
    """A short digest of what a submission asks for (everything but the envelope)."""
    body = json.dumps(event.model_dump(mode="json", exclude={"envelope"}), sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def differences(old: m.JobSubmitted, new: m.JobSubmitted) -> list[str]:
    """The fields in which two submissions of one job id differ, as `field: old -> new`."""
    a, b = old.model_dump(exclude={"envelope"}), new.model_dump(exclude={"envelope"})
    return [f"{key}: {a[key]!r} -> {b[key]!r}" for key in a if a[key] != b[key]]


def definition_events(document: Document, cell: str, at: int, producer: str = "launcher") -> list[m.Event]:
    """The configuration events a Team, Cohort or PriorityClass document stands for."""
    def envelope(what: str) -> m.Envelope:
        return m.Envelope(event_id=f"{producer}/{what}@{at}", cell=cell, at=at, producer=producer)

    name = document.name
    if isinstance(document, Cohort):
        return [m.CohortDefined(envelope=envelope(f"cohort/{name}"), cohort=name, parent=document.spec.parent)]
    if isinstance(document, PriorityClass):
        return [m.PriorityClassDefined(envelope=envelope(f"priorityclass/{name}"), name=name,
                                       value=document.spec.value, preemptible=document.spec.preemptible)]
    if isinstance(document, Team):
        spec = document.spec
        rules, borrow = spec.preemption, spec.preemption.borrow_within_cohort
        events: list[m.Event] = [m.TeamDefined(
            envelope=envelope(f"team/{name}"), team=name, cohort=spec.cohort, weight_milli=round(spec.weight * 1000),
            within_team=rules.within_team, reclaim_within_cohort=rules.reclaim_within_cohort,
            borrow_within_cohort=borrow.policy if borrow else None,
            max_priority_threshold=borrow.max_priority_threshold if borrow else None)]
        for gpu_type, quota in sorted(spec.quotas.items()):
            events.append(m.QuotaSet(envelope=envelope(f"quota/{name}/{gpu_type}"), team=name, gpu_type=gpu_type,
                                     nominal=quota.nominal, borrowing_limit=quota.borrowing_limit,
                                     lending_limit=quota.lending_limit))
        return events
    raise TypeError(f"{type(document).__name__} is not a definition")


def cancel_request(job_id: str, cell: str, at: int, producer: str = "launcher",
                   team: str | None = None) -> m.JobCancelRequested:
    """A cancel by `team` (the job's own: a cancel of another team's job is refused when folded)."""
    return m.JobCancelRequested(envelope=m.Envelope(event_id=f"{producer}/cancel/{job_id}@{at}", cell=cell, at=at,
                                                    producer=producer, correlation_id=job_id), job_id=job_id, team=team)


def cordon_request(node: str, cordon: bool, cell: str, at: int, detail: str = "",
                   producer: str = "operator") -> m.NodeCordoned | m.NodeUncordoned:
    kind = m.NodeCordoned if cordon else m.NodeUncordoned
    return kind(envelope=m.Envelope(event_id=f"{producer}/{'cordon' if cordon else 'uncordon'}/{node}@{at}",
                                    cell=cell, at=at, producer=producer), node=node, detail=detail)
