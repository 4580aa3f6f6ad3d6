"""Time limits end runs under gangway-3 (Slurm's TimeLimit), and only plan backfill under gangway-2, so logs
recorded under gangway-2 still verify."""

from pathlib import Path

import yaml

from events import models as m
from replay.scenario.play import parse, run
from services.policies import GANGWAY, resolve

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "time_limit_ends_the_run.yaml"


def played(**recovery):
    data = yaml.safe_load(SCENARIO.read_text())
    if recovery:
        data["policy"] = {"recovery": recovery}
    return run(parse(data, str(SCENARIO)))


def test_the_default_enforces_time_limits_and_gangway_2_does_not():
    assert GANGWAY.version == "gangway-11" and GANGWAY.recovery.enforce_time_limits
    assert resolve("gangway-3").recovery == resolve("gangway-10").recovery
    assert not resolve("gangway-2").recovery.enforce_time_limits
    assert not resolve("gangway-1").recovery.enforce_time_limits
    assert resolve("gangway-2+recovery.enforce_time_limits=true").recovery.enforce_time_limits


def test_a_run_past_its_limit_ends_once_with_its_run_time_and_limit_in_the_detail():
    failed = [e for e in played().cell.log if isinstance(e, m.JobFailed)]
    assert [(e.job_id, e.envelope.reason, e.envelope.producer) for e in failed] == [
        ("over", m.Reason.TIME_LIMIT_EXCEEDED, "recovery")]
    assert failed[0].detail == "its run of 20m29s exceeded its time limit of 20m"
    assert failed[0].envelope.at == 20 * 60_000 + 30_000  # the first Tick past 20m after its start at 1s


def test_without_enforcement_the_run_goes_on_and_the_big_gang_waits():
    outcome = played(enforce_time_limits=False)
    assert not any(isinstance(e, m.JobFailed) for e in outcome.cell.log)
    jobs = outcome.cell.state.jobs
    assert jobs["over"].state.value == "running" and jobs["big"].state.value == "queued"


def test_workers_get_five_minutes_to_start_under_gangway_3_and_for_ever_under_gangway_2():
    assert GANGWAY.recovery.start_timeout_ms == 5 * 60_000
    assert resolve("gangway-2").recovery.start_timeout_ms is None
    data = yaml.safe_load((SCENARIO.parent / "workers_not_started_in_time.yaml").read_text())
    data["policy"] = {"recovery": {"start_timeout_ms": None}}
    outcome = run(parse(data, "no start timeout"))
    assert not any(isinstance(e, (m.JobInterrupted, m.JobFailed)) for e in outcome.cell.log)
    assert outcome.cell.state.jobs["slow"].state.value == "running"  # it started at 10m and runs
