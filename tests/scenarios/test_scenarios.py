"""Every scenario file in this folder runs in virtual time and meets all of its expectations."""

import json
from pathlib import Path

import pytest

from replay.cli import main
from replay.scenario.play import ScenarioError, load, run_file

HERE = Path(__file__).parent
SCENARIOS = sorted(HERE.glob("*.yaml"))


def test_there_are_enough_scenarios():
    assert len(SCENARIOS) >= 40


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_scenario_meets_its_expectations(path):
    outcome = run_file(path)
    assert outcome.results, f"{path.name} checks nothing"
    unmet = [f"expected {r.describe()}; observed {r.observed}" for r in outcome.unmet]
    assert not unmet, f"{path.name}:\n" + "\n".join(unmet)


def test_scenario_names_are_unique():
    names = [load(p).name for p in SCENARIOS]
    assert len(names) == len(set(names))


def _write(tmp_path, text: str) -> Path:
    path = tmp_path / "scenario.yaml"
    path.write_text(text)
    return path


UNMET = """
name: unmet
cell:
  nodes: [{name: n0, gpus: 8, gpu_type: H100}]
teams: [{name: nlp, quota: {H100: 8}}]
until: 5m
inputs:
  - {at: 0s, submit: {job: llm, team: nlp, gpus_per_worker: 8}}
expect:
  - {at: 1m, job: llm, state: running}
  - {at: 2m, job: llm, state: succeeded}
  - {team: nlp, gpus_in_use: 0}
"""


def test_an_unmet_expectation_makes_the_cli_exit_1_naming_it(tmp_path, capsys):
    path = _write(tmp_path, UNMET)
    assert main(["scenario", "run", str(path)]) == 1
    out, err = capsys.readouterr()
    lines = [json.loads(line) for line in out.splitlines()]
    assert {"offset", "at", "type", "reason"} <= set(lines[0])
    assert any(line["type"] == "JobPlaced" and line["job_id"] == "llm" for line in lines)
    assert f"FAIL {path}" in err
    assert f"UNMET {path}: expected at 2m: job=llm, state=succeeded; observed job llm is running" in err
    assert f"UNMET {path}: expected at end: team=nlp, gpus_in_use=0; observed team nlp uses 8 GPUs" in err
    assert err.count("UNMET") == 2  # the met expectation is not listed


def test_quiet_prints_only_the_summary(tmp_path, capsys):
    path = _write(tmp_path, UNMET.replace("state: succeeded", "state: running").replace("gpus_in_use: 0", "gpus_in_use: 8"))
    assert main(["scenario", "run", "--quiet", str(path)]) == 0
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"PASS {path} (unmet): 3/3 expectations met")


def test_an_invalid_file_names_the_file_and_each_bad_field(tmp_path, capsys):
    path = _write(tmp_path, UNMET.replace("gpus: 8,", "gpus: eight,").replace("until: 5m", "until: 5 minutes")
                  .replace("submit: {", "submit: {colour: red, "))
    with pytest.raises(ScenarioError) as error:
        load(path)
    message = str(error.value)
    assert f"{path}: cell.nodes[0].gpus: Input should be a valid integer" in message
    assert f"{path}: until: not a duration: '5 minutes'" in message
    assert f"{path}: inputs[0].submit.colour: unknown field" in message
    assert main(["scenario", "run", str(path)]) == 2
    assert f"INVALID {path}" in capsys.readouterr().err


def test_unknown_policy_knob_and_unknown_job_in_an_expectation_are_errors(tmp_path):
    text = UNMET.replace("until: 5m", "until: 5m\npolicy: {preemption: {grace: 5m}}")
    with pytest.raises(ScenarioError, match=r"policy: unknown knob policy.preemption.grace"):
        load(_write(tmp_path, text))
    with pytest.raises(ScenarioError, match=r"expect\[0\]: job 'gpt' is never submitted"):
        load(_write(tmp_path, UNMET.replace("{at: 1m, job: llm", "{at: 1m, job: gpt")))


def test_the_documented_example_runs_and_meets_its_expectations():
    import re

    import yaml

    from replay.scenario.play import parse, run

    doc = (HERE.parents[1] / "docs" / "scenarios.md").read_text()
    example = re.search(r"## A complete example\n\n```yaml\n(.*?)```", doc, re.S).group(1)
    outcome = run(parse(yaml.safe_load(example), "docs/scenarios.md"))
    assert outcome.results and not outcome.unmet


def test_without_the_week_bound_the_big_gang_still_waits_at_day_20(tmp_path):
    """gangway-8's rule (`admission.big_gangs_reserve_after_ms` None) on big_gang_waits_at_most_a_week.yaml: b's
    stream keeps 3 nodes from freeing at once, so in the scenario's 20 days the big gang never reserves nor starts."""
    text = (HERE / "big_gang_waits_at_most_a_week.yaml").read_text()
    outcome = run_file(_write(tmp_path, text.replace("tick: 10m", "policy: {admission: {big_gangs_reserve_after: null}}\ntick: 10m")))
    assert [r.describe() for r in outcome.unmet] == [
        "at 180h: job=big, reason=HOLDS_RESERVATION, logged=JobQueued, count=1",
        "at 264h30m: job=big, state=running", "at end: job=big, state=succeeded"]


def test_in_submit_order_long_starts_before_short(tmp_path):
    """gangway-9's order (`admission.earliest_deadline_first` off) on earliest_deadline_first.yaml: long, submitted a
    minute before short, starts when first ends, and nolimit, submitted before late, goes first."""
    text = (HERE / "earliest_deadline_first.yaml").read_text()
    outcome = run_file(_write(tmp_path, text.replace(
        "tick: 30s", "policy: {admission: {earliest_deadline_first: false}}\ntick: 30s")))
    assert [r.describe() for r in outcome.unmet] == [
        "at 1h5m: job=short, state=running", "at 1h5m: job=long, state=queued",
        "at 3h35m: job=late, state=running", "at 3h35m: job=nolimit, state=queued",
        "at 3h45m: job=nolimit, state=running"]  # it ran from 3h30m to 3h40m
