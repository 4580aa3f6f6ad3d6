"""Job, team, cohort and priority-class documents: every field's validation names the field, and valid
documents become the events the log expects."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from events import models as m
from events.launcher.requests import definition_events, differences, submission
from events.launcher.spec import Job, SpecError, load_documents, parse_document, with_paths_from
from projections.cell import CellState
from projections.evolve import evolve
from projections.readmodel.documents import MOST_COHORT_DEPTH, cohort_tree
from services.launcher.client import LauncherError, cohort_chain_problems, job_ids
from tests.builders import env

ROOT = Path(__file__).resolve().parents[2]
JOB = {"kind": "Job", "metadata": {"name": "train", "team": "vision", "labels": {"project": "x"}},
       "spec": {"workers": 2, "gpus_per_worker": 1, "gpu_type": "H100", "command": ["python", "train.py"]}}
TEAM = {"kind": "Team", "metadata": {"name": "vision"}, "spec": {"cohort": "lab", "quotas": {"H100": 4}}}


def with_value(document: dict, path: str, value) -> dict:
    out = copy.deepcopy(document)
    *parents, last = path.split(".")
    node = out
    for key in parents:
        node = node.setdefault(key, {})
    if value is DELETE:
        del node[last]
    else:
        node[last] = value
    return out


DELETE = object()

BAD_JOBS = [
    ("kind", "Jobb", "kind: must be one of Job, Team, Cohort, PriorityClass"),
    ("metadata.name", "bad name", "metadata.name: 'bad name' is not a valid name"),
    ("metadata.name", DELETE, "metadata.name: required"),
    ("metadata.team", DELETE, "metadata.team: required (or give --team)"),
    ("metadata.team", "a/b", "metadata.team: 'a/b' is not a valid name"),
    ("metadata.cell", "", "metadata.cell: '' is not a valid name"),
    ("metadata.labels", {"a": 1}, "metadata.labels.a: input should be a valid string"),
    ("metadata.owner", "me", "metadata.owner: unknown field"),
    ("spec.workers", 0, "spec.workers: must be ≥ 1"),
    ("spec.workers", "two", "spec.workers: input should be a valid integer"),
    ("spec.workers", True, "spec.workers: input should be a valid integer"),  # it was 1 worker
    ("spec.workers", "2", "spec.workers: input should be a valid integer"),  # it was 2
    ("spec.workers", DELETE, "spec.workers: required"),
    ("spec.gpus_per_worker", 0, "spec.gpus_per_worker: must be ≥ 1"),
    ("spec.gpus_per_worker", 2048, "spec.gpus_per_worker: must be ≤ 1024"),
    ("spec.gpu_type", DELETE, "spec.gpu_type: required"),
    ("spec.gpu_type", "H 100", "spec.gpu_type: 'H 100' is not a valid name"),
    ("spec.min_workers", 0, "spec.min_workers: must be ≥ 1"),
    ("spec.min_workers", 3, "spec.min_workers: must be ≤ workers (2)"),
    ("spec.priority_class", "not ok", "spec.priority_class: 'not ok' is not a valid name"),
    ("spec.topology", {"required": "rack", "exact": True}, "spec.topology.exact: unknown field"),
    ("spec.topology", {"preferred": "a b"}, "spec.topology.preferred: 'a b' is not a valid name"),
    ("spec.time_limit", "2 hours", "spec.time_limit: not a duration: '2 hours'"),
    ("spec.time_limit", 0, "spec.time_limit: must be > 0"),
    ("spec.command", [], "spec.command: must not be empty"),
    ("spec.command", DELETE, "spec.command: required"),
    ("spec.command", "python train.py", "spec.command: input should be a valid list"),
    ("spec.args", [1], "spec.args.0: input should be a valid string"),
    ("spec.env", {"SEED": 1}, "spec.env.SEED: input should be a valid string"),
    ("spec.env", {"1SEED": "1"}, "spec.env: '1SEED' is not an environment variable name"),
    ("spec.working_dir", 3, "spec.working_dir: input should be a valid string"),
    ("spec.checkpoint_dir", ["a"], "spec.checkpoint_dir: input should be a valid string"),
    ("spec.restart_budget", -1, "spec.restart_budget: must be ≥ 0"),
    ("spec.gpus", 8, "spec.gpus: unknown field"),
]


@pytest.mark.parametrize(("path", "value", "message"), BAD_JOBS, ids=[f"{p}={v!r}" for p, v, _ in BAD_JOBS])
def test_a_bad_job_field_is_named(path, value, message):
    with pytest.raises(SpecError) as error:
        parse_document(with_value(JOB, path, value), "job.yaml")
    assert str(error.value).startswith(f"job.yaml: {message}"), str(error.value)


BAD_DEFINITIONS = [
    (TEAM, "spec.cohort", "a b", "spec.cohort: 'a b' is not a valid name"),
    (TEAM, "spec.weight", 0, "spec.weight: must be ≥ 0.001"),
    (TEAM, "spec.weight", 0.0000001, "spec.weight: must be ≥ 0.001"),  # it became 0 thousandths
    (TEAM, "spec.weight", float("nan"), "spec.weight: input should be a finite number"),
    (TEAM, "spec.weight", "2", "spec.weight: input should be a valid number"),
    (TEAM, "spec.quotas", {"H100": 10**30}, "spec.quotas.H100.nominal: must be ≤ 1000000000"),  # a traceback
    (TEAM, "spec.quotas", {"H100": 1.5}, "spec.quotas.H100: a whole number of GPUs (the nominal) or {nominal"),
    (TEAM, "spec.quotas", {"H100": True}, "spec.quotas.H100: a whole number of GPUs"),
    (TEAM, "spec.quotas", {"H100": {"nominal": 4, "lending_limit": 100}},
     "spec.quotas.H100.lending_limit: must be ≤ nominal (4)"),
    (TEAM, "spec.quotas", {"H100": -1}, "spec.quotas.H100.nominal: must be ≥ 0"),
    (TEAM, "spec.quotas", {"H100": {"nominal": 4, "borrowing_limit": -2}},
     "spec.quotas.H100.borrowing_limit: must be ≥ 0"),
    (TEAM, "spec.quotas", {"H100": {"nominal": 4, "lending_limit": -1}}, "spec.quotas.H100.lending_limit: must be ≥ 0"),
    (TEAM, "spec.quotas", {"H100": {"borrowing_limit": 2}}, "spec.quotas.H100.nominal: required"),
    (TEAM, "spec.preemption", {"within_team": "Sometimes"},
     "spec.preemption.within_team: must be 'Never', 'LowerPriority' or 'LowerOrNewerEqualPriority'"),
    (TEAM, "spec.preemption", {"reclaim_within_cohort": "All"},
     "spec.preemption.reclaim_within_cohort: must be 'Never', 'LowerPriority' or 'Any'"),
    (TEAM, "spec.preemption", {"borrow_within_cohort": 1}, "spec.preemption.borrow_within_cohort: input should be"),
    (TEAM, "spec.preemption", {"within_team": "Any"}, "spec.preemption.within_team: must be 'Never'"),
    (TEAM, "spec.preemption", {"borrow_within_cohort": "Any"},
     "spec.preemption.borrow_within_cohort.policy: must be 'Never' or 'LowerPriority'"),
    (TEAM, "spec.preemption", {"reclaim_within_cohort": "Never", "borrow_within_cohort": "LowerPriority"},
     "spec.preemption.borrow_within_cohort: needs reclaim_within_cohort other than Never"),
    ({"kind": "Cohort", "metadata": {"name": "lab"}}, "spec.parent", "x y", "spec.parent: 'x y' is not a valid name"),
    ({"kind": "PriorityClass", "metadata": {"name": "p"}, "spec": {"value": 1}}, "spec.value", "high",
     "spec.value: input should be a valid integer"),
    ({"kind": "PriorityClass", "metadata": {"name": "p"}, "spec": {"value": 1}}, "spec.preemptible", "maybe",
     "spec.preemptible: input should be a valid boolean"),
]


@pytest.mark.parametrize(("document", "path", "value", "message"), BAD_DEFINITIONS,
                         ids=[f"{d['kind']}.{p}" for d, p, _, _ in BAD_DEFINITIONS])
def test_a_bad_definition_field_is_named(document, path, value, message):
    with pytest.raises(SpecError) as error:
        parse_document(with_value(document, path, value), "d.yaml")
    assert str(error.value).startswith(f"d.yaml: {message}"), str(error.value)


def test_every_problem_of_a_file_is_listed_with_its_document(tmp_path: Path):
    path = tmp_path / "two.yaml"
    path.write_text("kind: Job\nmetadata: {name: a, team: t}\nspec: {workers: 0, gpus_per_worker: 1, gpu_type: X, "
                    "command: [x]}\n---\nkind: Team\nmetadata: {name: 'b c'}\n")
    with pytest.raises(SpecError) as error:
        load_documents(path)
    assert error.value.problems == [f"{path}[0]: spec.workers: must be ≥ 1",
                                    f"{path}[1]: metadata.name: 'b c' is not a valid name "
                                    "(letters, digits, '.', '_', '-')"]
    (tmp_path / "broken.yaml").write_text("kind: [")
    with pytest.raises(SpecError, match=r"broken.yaml: not valid YAML \(line 1\)"):
        load_documents(tmp_path / "broken.yaml")
    with pytest.raises(SpecError, match="cannot read"):
        load_documents(tmp_path / "missing.yaml")


def test_the_examples_are_valid():
    kinds = [d.kind for f in sorted((ROOT / "examples").glob("*.yaml")) for d in load_documents(f)]
    assert sorted(kinds) == ["Cohort", "Job", "Job", "PriorityClass", "PriorityClass", "Team", "Team"]


def test_a_job_becomes_its_submission_and_the_same_spec_the_same_event():
    job = with_paths_from(parse_document(JOB, "j"), Path("/work/x"))
    assert isinstance(job, Job)
    event = submission(job, "train", "cell-a", 1_000)
    assert (event.job_id, event.team, event.workers, event.gpus_per_worker, event.gpu_type) == (
        "train", "vision", 2, 1, "H100")
    assert event.command == ["python", "train.py"] and event.working_dir == "/work/x" and event.max_restarts == 3
    assert event.labels == {"project": "x"}
    later = submission(job, "train", "cell-a", 9_000)
    assert later.envelope.event_id == event.envelope.event_id, "the same submission is the same event"
    other = submission(parse_document(with_value(JOB, "spec.args", ["--fast"]), "j"), "train", "cell-a", 1_000)
    assert other.envelope.event_id != event.envelope.event_id
    assert differences(event, other) == ["command: ['python', 'train.py'] -> ['python', 'train.py', '--fast']",
                                         "working_dir: '/work/x' -> None"]


@pytest.mark.parametrize("bad", ["../../escaped", "/tmp/abs", "a\nb", "", "a/b", "-x", "x" * 129, "caf\u00e9"])
def test_a_job_id_must_be_a_name(bad):
    """An id names the job's directories on its nodes and its path in the query API: a given id that is not a name
    is refused, in one short line, before anything is read or written."""
    job = parse_document(JOB, "j")
    with pytest.raises(LauncherError) as refused:
        job_ids([job], bad, None)
    assert str(refused.value).startswith("train: job id ") and "is not a name: letters, digits" in str(refused.value)
    assert "\n" not in str(refused.value) and len(str(refused.value)) < 200


def test_a_long_bad_value_is_shown_cut_short():
    with pytest.raises(SpecError) as error:
        parse_document(with_value(JOB, "metadata.name", "a b" * 3000), "job.yaml")
    assert str(error.value).startswith("job.yaml: metadata.name: 'a ba ba b") and len(str(error.value)) < 150


def test_a_job_id_is_given_derived_or_the_name():
    job = parse_document(JOB, "j")
    assert job_ids([job], None, None) == ["train"]
    assert job_ids([job], "train-2.a_b", None) == ["train-2.a_b"]
    (derived,) = job_ids([job], None, "retry-7")
    assert derived.startswith("train-") and derived != "train"
    with pytest.raises(LauncherError, match="names exactly one job"):
        job_ids([job, job], "x", None)


def test_a_team_becomes_its_definition_and_quotas():
    team = parse_document({**TEAM, "spec": {"cohort": "lab", "weight": 2,
                                             "quotas": {"H100": 4, "A100": {"nominal": 2, "lending_limit": 1}},
                                             "preemption": {"within_team": "LowerPriority",
                                                            "borrow_within_cohort": {"policy": "LowerPriority",
                                                                                     "max_priority_threshold": 100}}}},
                          "t")
    events = definition_events(team, "cell-a", 5)
    assert [type(e) for e in events] == [m.TeamDefined, m.QuotaSet, m.QuotaSet]
    assert (events[0].team, events[0].cohort, events[0].weight_milli) == ("vision", "lab", 2000)
    assert (events[0].within_team, events[0].reclaim_within_cohort, events[0].borrow_within_cohort,
            events[0].max_priority_threshold) == ("LowerPriority", None, "LowerPriority", 100)
    assert [(q.gpu_type, q.nominal, q.borrowing_limit, q.lending_limit) for q in events[1:]] == [
        ("A100", 2, None, 1), ("H100", 4, None, None)]


def test_cohorts_whose_parents_come_back_or_nest_too_deep_are_refused():
    """The cohort tree (`gangway teams`, the query API) nests cohorts under their parents: a cycle of parents left
    them out of it, and a chain 300 deep failed the API's answer."""
    assert cohort_chain_problems({"lab": None}, {"nlp": "lab", "cv": "lab"}) == []
    assert cohort_chain_problems({"a": "b"}, {"b": "a"}) == ["cohort b: its parents come back to it (b -> a -> b)"]
    assert cohort_chain_problems({}, {"self": "self"}) == ["cohort self: its parents come back to it (self -> self)"]
    chain = {f"d{i}": f"d{i - 1}" if i else None for i in range(17)}
    assert cohort_chain_problems({}, {k: v for k, v in chain.items() if k != "d16"}) == []  # 16 deep
    assert cohort_chain_problems({}, chain) == ["cohort d16: more than 16 cohorts deep"]


def test_the_cohort_tree_lists_every_cohort_however_its_parents_were_written():
    state = CellState()
    parents = {"ca": "cb", "cb": "ca", **{f"d{i}": f"d{i - 1}" if i else None for i in range(300)}}
    for offset, (name, parent) in enumerate(parents.items()):
        assert evolve(state, m.CohortDefined(envelope=env(0), cohort=name, parent=parent), offset) is None

    def names(nodes, depth=1):
        assert depth <= MOST_COHORT_DEPTH + 1
        return [n for node in nodes for n in [node["name"], *names(node["children"], depth + 1)]]
    listed = names(cohort_tree(state))
    assert sorted(listed) == sorted(parents) and len(listed) == len(parents), "each cohort once, none left out"
