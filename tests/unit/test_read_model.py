"""The launcher read model folds a cell's log into jobs' submissions, attempts (placement, workers, how each
ended, the step it resumed from), checkpoint steps and the details of the latest decisions."""

from pathlib import Path

from events import models as m
from projections.read_model import ReadModel
from replay.scenario.play import load, run

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


def folded(name: str) -> ReadModel:
    model = ReadModel()
    for offset, event in enumerate(run(load(SCENARIOS / name)).cell.log):
        model.fold(offset, event)
    return model


def test_a_preempted_job_has_two_attempts_and_resumes_from_its_checkpoint():
    model = folded("preempt_checkpoint_completed.yaml")
    attempts = model.attempts["victim"]
    assert sorted(attempts) == [1, 2]
    assert (attempts[1].outcome, attempts[2].outcome) == ("preempted", "succeeded")
    assert sorted(attempts[1].started) == [0, 1] and attempts[2].exits == {0: 0, 1: 0}
    assert model.submissions["victim"].priority_class == "low"
    assert model.attempts["high"][1].outcome == "succeeded"


def test_checkpoint_steps_and_rejections_are_kept():
    model = folded("reject_duplicate_id.yaml")
    assert model.rejections["llm"].envelope.reason is m.Reason.DUPLICATE_JOB
    assert model.submissions["llm"].team == "nlp", "the first submission is the job's"
    job = model.job("llm")
    envelope = m.Envelope(event_id="c", cell=model.state.cell, at=job.running_since + 1, producer="a")
    step = m.CheckpointCompleted(envelope=envelope, job_id="llm", attempt=job.attempt, checkpoint_id="llm/a1/step-40",
                                 progress_ms=5, step=40)
    model.fold(model.state.offset + 1, step)
    assert model.checkpoint_step(job) == 40


def test_the_latest_decision_detail_is_kept():
    model = folded("reject_invalid_requests.yaml")
    rejected = [j for j in model.jobs() if j.state.value == "rejected"]
    assert rejected and all(model.details[j.job_id] for j in rejected)
