"""The one way a job request becomes a `JobSubmitted`: the trace loader, the simulator, the scenario runner,
the demo and the launcher SDK all build it here, with an event id derived from the job and its time, so the
same request is the same event wherever it comes from."""

from __future__ import annotations

from events.models import Envelope, JobSubmitted


def job_submitted(job_id: str, team: str, workers: int, gpus_per_worker: int, gpu_type: str, *, cell: str, at: int,
                  producer: str | None = None, event_id: str | None = None, priority_class: str | None = None,
                  min_workers: int | None = None, topology_required: str | None = None,
                  topology_preferred: str | None = None, time_limit_ms: int | None = None, max_restarts: int = 3,
                  labels: dict[str, str] | None = None, command: list[str] | None = None,
                  env: dict[str, str] | None = None, working_dir: str | None = None,
                  checkpoint_dir: str | None = None) -> JobSubmitted:
    """A submission of `workers` x `gpus_per_worker` GPUs by `producer` (default `launcher/<team>`); a real job
    also says what its workers run (`command`, `env`, `working_dir`) and where it checkpoints."""
    producer = producer or f"launcher/{team}"
    return JobSubmitted(
        envelope=Envelope(event_id=event_id or f"{producer}/{job_id}@{at}", cell=cell, at=at, producer=producer,
                          correlation_id=job_id),
        job_id=job_id, team=team, workers=workers, gpus_per_worker=gpus_per_worker, gpu_type=gpu_type,
        priority_class=priority_class, min_workers=min_workers, topology_required=topology_required,
        topology_preferred=topology_preferred, time_limit_ms=time_limit_ms, max_restarts=max_restarts,
        labels=dict(labels or {}), command=list(command or []), env=dict(env or {}), working_dir=working_dir,
        checkpoint_dir=checkpoint_dir)
