"""Records the state must refuse change nothing: interleaved with a normal stream, each is answered by its
refusal, no invariant breaks, nothing escapes the runner, and every decision about the well-behaved jobs is
what it would have been without them."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events import models as m
from replay.scenario.play import load, run
from replay.scenario.spec import Input, Scenario
from replay.verify import verify
from services.deciders import DECIDERS
from tests.property.invariants import Invariants
from tests.property.streams import MINUTE, DataChooser, stream

REFUSED_RECORDS = Path(__file__).parents[1] / "scenarios" / "refused_records.yaml"
BEYOND = 9_000_000_000_000_000_000  # a stamp past 2100, near 2^63

#: Records refused in any state of the random streams' cell (job ids j*, nodes n0..n4, teams a, b, c).
HOSTILE: list[dict] = [
    {"type": "JobSubmitted", "cell": "another-cell", "job_id": "x", "team": "a", "workers": 1, "gpus_per_worker": 1,
     "gpu_type": "H100"},
    {"type": "JobCancelRequested", "cell": "another-cell", "job_id": "j0"},
    {"type": "JobCancelRequested", "job_id": "j" * 600},
    {"type": "JobSubmitted", "job_id": "y", "team": "t" * 300, "workers": 1, "gpus_per_worker": 1, "gpu_type": "H100"},
    {"type": "JobSubmitted", "stamped": BEYOND, "job_id": "z", "team": "a", "workers": 1, "gpus_per_worker": 1,
     "gpu_type": "H100"},
    {"type": "NodeRegistered", "node": "n9", "gpu_type": "H100", "gpus": 1_000_000_000},
    {"type": "NodeRegistered", "node": "n8", "gpu_type": "H100", "gpus": 0},
    {"type": "CellConfigured", "topology_levels": ["block", "rack"], "max_name_length": 0},  # would refuse all
    {"type": "CellConfigured", "topology_levels": ["block", "rack"], "max_gpus_per_node": -1, "max_workers": 0},
    {"type": "Tick", "stamped": BEYOND},
    {"type": "Tick", "stamped": 40 * 24 * 60 * MINUTE},
    {"type": "WorkerExited", "job_id": "nobody", "attempt": 1, "worker": 0, "node": "n0", "exit_code": 0},
    {"type": "WorkerStarted", "job_id": "nobody", "attempt": 1, "worker": 0, "node": "n0"},
    {"type": "CheckpointCompleted", "job_id": "nobody", "attempt": 1, "checkpoint_id": "c", "progress_ms": 1},
    {"type": "GpuErrorReported", "node": "n99", "gpu": 0, "xid": 79},
    {"type": "NodeCordoned", "node": "n99"},
    {"type": "NodeHealthCheckPassed", "node": "n99"},
    {"type": "JobCancelRequested", "job_id": "j0", "stamped": -5},
    {"type": "JobSubmitted", "job_id": "x\x00j0", "team": "a", "workers": 1, "gpus_per_worker": 1, "gpu_type": "H100"},
    {"type": "JobCancelRequested", "job_id": "j0\x1b[2K"},
    {"type": "NodeRegistered", "node": "n\u202e0", "gpu_type": "H100", "gpus": 8},
]


def with_inputs(scenario: Scenario, extra: list[dict]) -> Scenario:
    inputs = [*scenario.inputs, *(Input.model_validate(i) for i in extra)]
    return scenario.model_copy(update={"inputs": sorted(inputs, key=lambda i: i.at)})


def about_well_behaved_jobs(log: list[m.Event], hostile_ids: set[str]) -> list[dict]:
    """Every decision but the refusals, without what depends on log positions (ids, offsets)."""
    out = []
    for event in log:
        if not event.is_decision or isinstance(event, m.RecordRefused) or getattr(event, "job_id", None) in hostile_ids:
            continue
        row = event.model_dump(mode="json", exclude={"envelope": {"event_id", "causation_id", "basis_offset"},
                                                     "request_event_id": True})
        out.append(row)
    return out


def test_the_refused_records_scenario_runs_its_jobs_as_without_them():
    scenario = load(REFUSED_RECORDS)
    well_behaved = [i for i in scenario.inputs if i.record is None and not (i.submit and i.submit.job.startswith("bad-"))
                    and i.heartbeat_silence is None]
    plain = scenario.model_copy(update={"inputs": well_behaved, "expect": []})
    hostile = run(scenario).cell.log
    calm = run(plain).cell.log
    jobs = {"a", "b"}
    assert ([d for d in about_well_behaved_jobs(hostile, set()) if d.get("job_id") in jobs]
            == [d for d in about_well_behaved_jobs(calm, set()) if d.get("job_id") in jobs])


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_hostile_records_are_refused_and_change_nothing_else(data):
    scenario = stream(DataChooser(data), steps=20)
    picks = data.draw(st.lists(st.sampled_from(range(len(HOSTILE))), min_size=1, max_size=8), label="hostile")
    # From 1 ms on, after the cell's first Tick: the first Tick sets the clock, so before it there is nothing to
    # measure a Tick's jump against (who may write Ticks at all is the broker's ACLs' business).
    extra = [{"at": data.draw(st.integers(1, 30 * MINUTE), label="at"), "record": HOSTILE[i]} for i in picks]
    checks = Invariants()
    outcome = run(with_inputs(scenario, extra), observers=[checks])  # nothing escapes, every invariant holds
    calm = run(scenario)
    log = outcome.cell.log
    refusals = [e for e in log if isinstance(e, m.RecordRefused)]
    already = sum(1 for e in calm.cell.log if isinstance(e, m.RecordRefused))  # the stream's own impossible exits
    assert len(refusals) == already + len(extra), [(e.refused_type, e.envelope.reason.value) for e in refusals]
    assert about_well_behaved_jobs(log, {"x", "y", "z"}) == about_well_behaved_jobs(calm.cell.log, set())
    for name, decider in sorted(DECIDERS.items()):  # and replay refuses them exactly as the runner did
        assert verify(list(enumerate(log)), decider()).ok, name
