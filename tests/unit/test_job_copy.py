"""A job's copy (what the overlay keeps of every job a decision it lays touches, projections/overlay.py) carries every
field: `Job.__copy__` names them one by one, so a field added to the job and not to the copy would come back wrong
when the overlay is lifted."""

from __future__ import annotations

import copy
import dataclasses

from events.models import Reason
from projections.jobs import Checkpoint, Job, JobState


def test_a_jobs_copy_carries_every_field_and_shares_its_history() -> None:
    job = Job("llm", "nlp", 4, 8, "H100", 3, False, 1_000, 7)
    for i, f in enumerate(dataclasses.fields(Job)):
        value = getattr(job, f.name)
        if f.name in ("job_id", "team", "gpu_type"):
            continue
        if f.name == "state":
            job.state = JobState.PREEMPTING
        elif f.name == "reason":
            job.reason = Reason.CHECKPOINT_DEADLINE_PASSED
        elif f.name == "checkpoint":
            job.checkpoint = Checkpoint("ck-1", 60_000, 5_000)
        elif f.name == "history":
            job.history.append((7, 1_000, "JobSubmitted", "submitted"))
        elif isinstance(value, bool):
            setattr(job, f.name, not value)
        elif f.name in ("assignments", "held"):
            setattr(job, f.name, ((0, "node-1", (i, i + 1)),))
        elif f.name in ("started_workers", "succeeded_workers"):
            setattr(job, f.name, frozenset({i}))
        elif isinstance(value, (tuple, frozenset)):
            setattr(job, f.name, type(value)((f"x{i}",)))
        elif f.name in ("topology_required", "topology_preferred", "domain", "preempted_for"):
            setattr(job, f.name, f"value-{i}")
        else:
            setattr(job, f.name, 1_000 + i)
    kept = copy.copy(job)
    assert kept is not job
    for f in dataclasses.fields(Job):
        assert getattr(kept, f.name) == getattr(job, f.name), f.name
        assert getattr(kept, f.name) != getattr(Job("a", "b", 1, 1, "c", 0, False, 0, 0), f.name) or f.name in (
            "gpu_type",), f"{f.name} was left at its default: the test sets every field"
    assert kept.history is job.history  # the overlay cuts the notes a decision appended off the shared list
    kept.state = JobState.QUEUED
    assert job.state is JobState.PREEMPTING
