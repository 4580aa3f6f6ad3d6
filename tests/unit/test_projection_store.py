"""The RocksDB projection: what it stores equals the live state, a restart resumes at the stored
offset, and a re-delivered event is skipped — checked on every scenario's log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from projections.cell import CellState
from projections.evolve import evolve
from projections.snapshot import CELL_KEY, OutdatedSnapshot, dump
from projections.store import ProjectionStore
from replay.scenario.play import load, run

SCENARIOS = sorted((Path(__file__).resolve().parents[1] / "scenarios").glob("*.yaml"))


def recorded_log(path: Path) -> list:
    return run(load(path)).cell.log


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_store_saved_in_batches_equals_the_live_fold(path: Path, tmp_path: Path) -> None:
    log = recorded_log(path)
    live = CellState()
    store = ProjectionStore(tmp_path / "db")
    for offset, event in enumerate(log):
        evolve(live, event, offset)
        if offset % 7 == 0:  # batches of uneven size, as a consumer would see them
            store.save(live)
    store.save(live)
    assert dump(store.load()) == dump(live)


@pytest.mark.parametrize("path", SCENARIOS[::5], ids=[p.stem for p in SCENARIOS[::5]])
def test_a_restart_resumes_at_the_stored_offset_and_ends_equal(path: Path, tmp_path: Path) -> None:
    log = recorded_log(path)
    half = len(log) // 2
    first = CellState()
    store = ProjectionStore(tmp_path / "db")
    for offset, event in enumerate(log[:half]):
        evolve(first, event, offset)
    store.save(first)
    store.close()

    reopened = ProjectionStore(tmp_path / "db")
    resumed = reopened.load()
    assert resumed.offset == half - 1
    for offset, event in enumerate(log):  # the whole log is re-delivered: folded events are skipped by offset
        evolve(resumed, event, offset)
    rebuilt = CellState()
    for offset, event in enumerate(log):
        evolve(rebuilt, event, offset)
    assert dump(resumed) == dump(rebuilt)


@pytest.mark.parametrize("path", SCENARIOS[::5], ids=[p.stem for p in SCENARIOS[::5]])
def test_a_state_that_tracks_no_rows_is_saved_whole(path: Path, tmp_path: Path) -> None:
    untracked = CellState(tracks_rows=False)  # as an audit or the simulator folds
    store = ProjectionStore(tmp_path / "db")
    for offset, event in enumerate(recorded_log(path)):
        evolve(untracked, event, offset)
        if offset % 7 == 0:
            store.save(untracked)
    store.save(untracked)
    assert dump(store.load()) == dump(untracked)


def test_an_empty_store_has_no_state(tmp_path: Path) -> None:
    assert ProjectionStore(tmp_path / "db").load() is None


def test_extra_rows_are_saved_with_the_state(tmp_path: Path) -> None:
    state = CellState(cell="cell-a", offset=41)
    store = ProjectionStore(tmp_path / "db")
    store.save(state, extra={"assumed": b'["admitter-40-1"]'})
    assert store.extra("assumed") == b'["admitter-40-1"]'
    assert store.load().offset == 41


def test_a_store_an_older_gangway_saved_is_refused_and_can_be_cleared(tmp_path: Path) -> None:
    store = ProjectionStore(tmp_path / "db")
    store.bind("cluster/events/0")
    store.save(CellState(cell="cell-a", offset=7), extra={"assumed": b"[]"})
    row = json.loads(store._db[CELL_KEY.encode()])
    del row["service_sums"]  # as a Gangway before the succeeded jobs' GPU-time was kept wrote it
    store._db[CELL_KEY.encode()] = json.dumps(row).encode()
    with pytest.raises(OutdatedSnapshot, match="service_sums"):
        store.load()
    store.clear()
    assert store.load() is None and store.extra("assumed") is None
    store.bind("cluster/events/0")  # still bound to its log


def test_extra_rows_by_prefix_and_deleted_with_none(tmp_path: Path) -> None:
    store = ProjectionStore(tmp_path / "db")
    store.save(CellState(cell="cell-a", offset=1), extra={"trace/a": b"00-1", "trace/b": b"00-2", "side": b"{}"})
    store.save(CellState(cell="cell-a", offset=2), extra={"trace/a": None, "trace/c": b"00-3"})
    assert store.extras("trace/") == {"trace/b": b"00-2", "trace/c": b"00-3"}
    assert store.extra("side") == b"{}"


def test_every_field_of_jobs_and_nodes_is_stored():
    """A field added to Job or Node is saved and restored without touching the snapshot code."""
    from dataclasses import fields

    from projections.cluster import Node
    from projections.jobs import Job
    from projections.snapshot import _job, _node

    job = Job("j", "nlp", 2, 8, "H100", priority=0, preemptible=True, submitted_at=0, submit_offset=0)
    node = Node("n", "H100", 8, ("b0",))
    assert set(_job(job)) == {f.name for f in fields(Job)}
    assert set(_node(node)) == {f.name for f in fields(Node)}
