"""The read model (projections/readmodel/): folded in batches of any size, or resumed after a restart, it holds
exactly the rows of a rebuild in one go; its indexes list what the folded state says, page by page."""

from __future__ import annotations

from pathlib import Path

import pytest

from events import models as m
from projections.cell import CellState
from projections.evolve import evolve
from projections.readmodel.fold import CellFold
from projections.readmodel.store import ReadModelStore
from replay.scenario.play import load, run
from tests import builders as b
from tests.api_fixtures import every_job

SCENARIOS = sorted((Path(__file__).resolve().parents[1] / "scenarios").glob("*.yaml"))


def recorded_log(path: Path) -> list[m.Event]:
    return run(load(path)).cell.log


def cell_of(log: list[m.Event]) -> str:
    return log[0].envelope.cell


def fold_into(store: ReadModelStore, log: list[m.Event], batch: int, start: int = 0) -> CellFold:
    fold = store.load(cell_of(log))
    records = list(enumerate(log))[start:]
    for i in range(0, len(records), batch):
        store.apply(fold.fold(records[i:i + batch]))
    return fold


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_batches_and_restarts_give_the_rows_of_a_rebuild(path: Path, tmp_path: Path):
    log = recorded_log(path)
    rebuilt = ReadModelStore(tmp_path / "rebuilt")
    fold_into(rebuilt, log, batch=len(log))
    live = ReadModelStore(tmp_path / "live")
    fold_into(live, log[: len(log) // 2], batch=3)
    live.close()
    resumed = ReadModelStore(tmp_path / "live")  # a restart: the fold comes back from the rows
    fold = fold_into(resumed, log, batch=7, start=0)  # the whole log re-delivered: folded events are skipped
    assert resumed.rows() == rebuilt.rows()
    assert resumed.offset(cell_of(log)) == len(log) - 1 == fold.state.offset
    assert len(every_job(log)) == len({e.job_id for e in log if isinstance(e, m.JobSubmitted)}), "every job folded"


def busy_log() -> list[m.Event]:
    """Two teams, three priorities, 40 gangs on 4 nodes: some placed, some queued, some cancelled or rejected."""
    events = [b.topology("rack"), *[b.node(f"n{i}", rack=f"r{i % 2}") for i in range(4)],
              b.team("nlp", cohort="all"), b.quota("nlp", 16), b.team("cv", cohort="all"), b.quota("cv", 16),
              b.priority("high", 10), b.priority("low", -5)]
    for i in range(40):
        events.append(b.job(f"j{i:02d}", workers=1 + i % 2, gpus=8, team=("nlp", "cv")[i % 3 == 0], at=1000 * i,
                            priority_class=(None, "high", "low")[i % 3], time_limit_ms=3_600_000))
    events += [b.cancel(f"j{i:02d}", at=50_000 + i) for i in range(0, 40, 7)]
    events.append(b.job("bad", team="nobody", at=60_000))
    return b.fold(*events).log


def test_job_pages_follow_the_index_and_the_folded_state(tmp_path: Path):
    log = busy_log()
    store = ReadModelStore(tmp_path / "db")
    fold_into(store, log, batch=50)
    state = CellState()
    for offset, event in enumerate(log):
        evolve(state, event, offset)
    jobs = sorted(every_job(log), key=lambda j: (j.submitted_at, j.submit_offset))
    assert len(jobs) > 10

    def walk(filters, sort="submitted", descending=False, limit=4):
        seen, cursor = [], None
        while True:
            page, cursor = store.jobs(cell_of(log), filters, sort, descending, limit, cursor)
            assert len(page) <= limit
            seen += [doc["job_id"] for doc in page]
            if cursor is None:
                return seen

    assert walk({}) == [j.job_id for j in jobs]
    assert walk({}, descending=True) == [j.job_id for j in reversed(jobs)]
    for team in sorted({j.team for j in jobs}):
        for job_state in sorted({j.state.value for j in jobs}):
            want = [j.job_id for j in jobs if j.team == team and j.state.value == job_state]
            assert walk({"team": team, "state": job_state}, limit=3) == want
    by_priority = sorted(jobs, key=lambda j: (-j.priority, j.submitted_at, j.submit_offset))
    assert walk({}, sort="priority") == [j.job_id for j in by_priority]
    summary = store.summary(cell_of(log))
    assert sum(summary["jobs"].values()) == len(jobs)
    assert summary["gpus"]["busy"] == sum(len(n.holder) for n in state.cluster.nodes.values())
    assert len({j.state for j in jobs}) >= 4 and len({j.priority for j in jobs}) == 3


def test_a_job_document_and_its_timeline(tmp_path: Path):
    log = recorded_log(next(p for p in SCENARIOS if p.stem == "preempt_checkpoint_completed"))
    store = ReadModelStore(tmp_path / "db")
    fold_into(store, log, batch=5)
    preempted = next(j for j in every_job(log) if any(h[2] == "JobPreempted" for h in j.history))
    doc = store.job(cell_of(log), preempted.job_id)
    timeline = store.timeline(cell_of(log), preempted.job_id)
    assert [e["type"] for e in timeline] == [h[2] for h in preempted.history]
    assert [e["offset"] for e in timeline] == sorted(e["offset"] for e in timeline)
    assert doc["state"] == preempted.state.value and doc["timeline_length"] == len(timeline)
    assert any(e["type"] == "PreemptionRequested" and e["detail"].startswith("for ") for e in timeline)
    assert store.job(cell_of(log), "no-such-job") is None and store.timeline(cell_of(log), "no-such-job") == []


def test_nodes_lie_in_topology_order_and_a_domain_is_a_prefix(tmp_path: Path):
    log = recorded_log(next(p for p in SCENARIOS if p.stem == "topology_tightest"))
    store = ReadModelStore(tmp_path / "db")
    fold_into(store, log, batch=10)
    nodes = store.nodes(cell_of(log))
    assert nodes and [list(n["domains"].values()) + [n["name"]] for n in nodes] == sorted(
        list(n["domains"].values()) + [n["name"]] for n in nodes)
    first = list(nodes[0]["domains"].values())[:1]
    inside = store.nodes(cell_of(log), first)
    assert inside and all(list(n["domains"].values())[:1] == first for n in inside)
    assert len(inside) < len(nodes) or len({list(n["domains"].values())[0] for n in nodes}) == 1



def test_a_job_id_holding_the_key_separator_never_reaches_another_jobs_rows(tmp_path: Path):
    """NUL separates the parts of a row's key: a job `victim\\x00zzz` would be listed under `victim`'s timeline and
    missing from every page. The fold refuses it (CONTROL_CHARACTER), so `victim` reads as its own log says."""
    log = b.fold(b.node("n1"), b.team("nlp"), b.quota("nlp", 16), b.job("victim", gpus=8, at=1_000),
                 b.job("victim\x00zzz", gpus=8, at=2_000), b.tick(60_000)).log
    store = ReadModelStore(tmp_path / "db")
    fold_into(store, log, batch=len(log))
    assert {entry["offset"] for entry in store.timeline(cell_of(log), "victim")} == \
        {offset for offset, e in enumerate(log) if getattr(e, "job_id", None) == "victim"}
    page, _ = store.jobs(cell_of(log), {}, "submitted", False, 10, None)
    assert [j["job_id"] for j in page] == ["victim"]
    assert [e.envelope.reason for e in log if isinstance(e, m.RecordRefused)] == [m.Reason.CONTROL_CHARACTER]
