"""Launcher tools and real node agents on a real broker, with real processes: a 2-worker training job
ends with exactly the weights of an uninterrupted run after a preemption (checkpoint, requeue, resume on
another node) or after its agent is killed; cancelling leaves nothing running; a restarted agent adopts
its workers instead of starting them twice."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from events import models as m
from events.reader import read_log
from tests.integration.launcher_cell import LauncherCell, load_train

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def reference(steps: int) -> np.ndarray:
    """The same training run, uninterrupted, in one process (2 ranks)."""
    return load_train().reference(steps, world=2, seed=0, batch=64, lr=0.05)


def logged(cell: LauncherCell, kind: type, job: str) -> list:
    return [r.event for r in read_log("cell-a", cell.client.bootstrap, topics=cell.client.topics)
            if isinstance(r.event, kind) and getattr(r.event, "job_id", None) == job]


@pytest.fixture
def cell_factory(kafka_bootstrap, gangway_topics, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    cells = []

    def make(speedup: float, nodes: tuple[str, ...]) -> LauncherCell:
        monkeypatch.setenv("GANGWAY_EPOCH", repr(time.time()))  # one event-time origin for every process
        monkeypatch.setenv("GANGWAY_SPEEDUP", str(speedup))
        cells.append(LauncherCell(kafka_bootstrap, tmp_path, speedup, nodes))
        return cells[-1]

    yield make
    for cell in cells:
        exits = cell.stop()
        assert exits == dict.fromkeys(exits, 0), exits


def test_preempted_job_resumes_on_another_node_with_the_uninterrupted_weights(cell_factory):
    # Event time runs 30x: the preemptor protects a job's first 10 minutes (20 s here).
    cell = cell_factory(30, ("n1", "n2", "n3"))
    steps = 1400
    # Checkpoints only when asked (no periodic ones): the first attempt's one checkpoint can only be the answer to
    # the preemption's notice (SIGUSR1), never a periodic one that happened to fall on the same step or after it.
    # vision borrows nlp's idle quota
    job = cell.client.submit(cell.job("train", "vision", steps, extra=("--checkpoint-every", "0")))
    cell.wait(job, "running")
    urgent = cell.client.submit(cell.job("urgent", "nlp", 100, priority="urgent"))
    preempted = cell.wait(job, lambda s: s.attempt == 2)
    first = preempted.attempts[0]
    assert first["outcome"] == "preempted"
    rank0_node = next(w["node"] for w in first["workers"] if w["worker"] == 0)
    cell.wait(urgent, "running")  # placed: a cordon now cannot race its placement
    cell.client.cordon(rank0_node, detail="the resumed attempt must run elsewhere")
    assert cell.wait(urgent, "ended").state == "succeeded"
    done = cell.wait(job, "ended", timeout=120)
    assert done.state == "succeeded", cell.describe()

    records = [r for r in read_log("cell-a", cell.client.bootstrap, topics=cell.client.topics)
               if getattr(r.event, "job_id", None) == job]
    requested = next((r.offset for r in records if isinstance(r.event, m.PreemptionRequested)), None)
    assert requested is not None, cell.describe()
    first_checkpoints = [r for r in records if isinstance(r.event, m.CheckpointCompleted) and r.event.attempt == 1]
    assert [r.offset > requested for r in first_checkpoints] == [True], (
        "the preemption's notice (SIGUSR1) made rank 0 checkpoint, once", first_checkpoints, requested)
    asked = first_checkpoints[0].event
    second = done.attempts[1]
    assert second["resumed_from_step"] == asked.step
    assert rank0_node not in {w["node"] for w in second["workers"]}
    assert [w["exit_code"] for w in done.attempts[0]["workers"]] == [143, 143], "SIGTERM after JobPreempted"
    assert np.array_equal(cell.final_weights(job), reference(steps))
    assert cell.final_weights(job).tobytes() == reference(steps).tobytes()
    assert not any(cell.processes(job).values())


def test_job_whose_agent_is_killed_resumes_from_its_last_checkpoint(cell_factory):
    cell = cell_factory(30, ("n1", "n2", "n3"))
    steps = 700
    job = cell.client.submit(cell.job("train", "vision", steps))
    cell.wait(job, lambda s: s.checkpoint_step is not None and s.checkpoint_step >= 200)
    status = cell.client.get(job)
    victim = next(p["node"] for p in status.placement if p["worker"] == 1)
    cell.kill_agent(victim)  # kill -9: no goodbye; its worker runs on until the gang falls apart
    requeued = cell.wait(job, lambda s: s.attempt == 2)
    done = cell.wait(job, "ended", timeout=120)
    assert done.state == "succeeded", cell.describe()
    assert requeued.attempts[0]["outcome"] == "interrupted"
    failed = [e for e in read_log("cell-a", cell.client.bootstrap, topics=cell.client.topics)
              if isinstance(e.event, m.NodeFailed)]
    assert [f.event.node for f in failed] == [victim]
    second = done.attempts[1]
    assert second["resumed_from_step"] is not None and second["resumed_from_step"] >= 200
    assert victim not in {w["node"] for w in second["workers"]}
    assert cell.final_weights(job).tobytes() == reference(steps).tobytes()
    deadline = time.monotonic() + 30
    while any(cell.processes(job).values()):  # the orphan on the dead node loses its peer and exits
        assert time.monotonic() < deadline, cell.processes(job)
        time.sleep(0.5)


def test_cancel_queued_running_and_checkpointing_leaves_nothing_running(cell_factory):
    cell = cell_factory(30, ("n1", "n2"))
    client = cell.client
    running = client.submit(cell.job("running", "nlp", 5000))
    cell.wait(running, "running")
    queued = client.submit(cell.job("queued", "nlp", 100))
    assert cell.wait(queued, lambda s: s.state == "queued" and s.queue_position == 1).state == "queued"
    client.cancel(queued)
    assert cell.wait(queued, "ended").state == "cancelled"
    assert cell.processes(queued) == {}, "a queued job never ran"
    client.cancel(running)
    assert cell.wait(running, "ended").state == "cancelled"
    _until_gone(cell, running)
    assert cell.gpus_held_by(running) == []

    # A borrowing job asked to checkpoint (slowly) is cancelled before its checkpoint is reported.
    slow = client.submit(cell.job("slow", "vision", 5000, extra=("--checkpoint-delay", "30")))
    cell.wait(slow, "running")
    client.submit(cell.job("urgent", "nlp", 5000, priority="urgent"))
    cell.wait(slow, lambda s: s.state == "preempting", timeout=60)
    client.cancel(slow)
    assert cell.wait(slow, "ended").state == "cancelled"
    _until_gone(cell, slow)
    assert cell.gpus_held_by(slow) == []
    assert cell.wait("urgent", "running").state == "running"
    client.cancel("urgent")
    cell.wait("urgent", "ended")
    _until_gone(cell, "urgent")


def _until_gone(cell: LauncherCell, job: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        procs = cell.processes(job)
        exited = {e.worker for e in logged(cell, m.WorkerExited, job)}
        if procs and not any(procs.values()) and len(exited) == len({w for _, _, w in procs}):
            return
        assert time.monotonic() < deadline, f"{job}: processes {procs}, exits reported for workers {exited}"
        time.sleep(0.3)


def test_restarted_agent_adopts_its_workers_and_starts_nothing_twice(cell_factory):
    cell = cell_factory(1, ("n1", "n2"))  # recovery waits 30 s before failing a silent node: plenty for a restart
    steps = 400
    job = cell.client.submit(cell.job("train", "vision", steps))
    cell.wait(job, "running")
    cell.kill_agent("n1")
    cell.start_agent("n1")
    done = cell.wait(job, "ended", timeout=60)
    assert done.state == "succeeded", cell.describe()
    assert done.attempt == 1 and done.restarts == 0
    started = logged(cell, m.WorkerStarted, job)
    assert sorted((e.worker, e.node) for e in started) == [(0, "n1"), (1, "n2")]
    registered = [r.event for r in read_log("cell-a", cell.client.bootstrap, topics=cell.client.topics)
                  if isinstance(r.event, m.NodeRegistered) and r.event.node == "n1"]
    assert len(registered) == 2, "the restarted agent registers again"
    for node in ("n1", "n2"):
        out = (cell.work_dir(node) / "jobs" / job / "a1").glob("w*/stdout.log")
        assert [p.read_text().count("starts at step") for p in out] == [1]
    assert cell.final_weights(job).tobytes() == reference(steps).tobytes()
