"""Traces to submissions without a broker: reading ITP and Philly CSVs, the slice, quotas by GPU-hours,
job ids, gang shapes and compressed submission times."""

from __future__ import annotations

from pathlib import Path

import pytest

from events import models as m
from events.clock import VirtualClock
from events.load import Slice, quota_shares, select, submissions, team_events
from events.load_cli import play
from events.traces import TRACES, trace_rows


def write(path: Path, header: str, *rows: str) -> Path:
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


@pytest.fixture
def traces(tmp_path: Path) -> Path:
    write(tmp_path / "cluster01.csv", "job_id,submission_time,duration,num_gpu",
          "x,100,600,1", "y,130,1200,16", "z,160,60,64")
    write(tmp_path / "cluster02.csv", "job_id,submission_time,duration,num_gpu", "u,110,3600,8", "v,130,600,2")
    write(tmp_path / "other.csv", "job_id,submission_time,duration,num_gpu", "ignored,0,1,1")
    return tmp_path


def test_a_folder_means_its_cluster_files_merged_in_submission_order(traces: Path):
    rows = trace_rows(traces)
    assert [(r.cluster, r.row, r.submit_s) for r in rows] == [
        ("cluster01", 0, 100), ("cluster02", 0, 110), ("cluster01", 1, 130), ("cluster02", 1, 130),
        ("cluster01", 2, 160)]
    assert trace_rows(traces / "cluster02.csv")[0].duration_s == 3600


def test_philly_columns_are_read_too(tmp_path: Path):
    philly = write(tmp_path / "philly_103959.csv",
                   "job_id,submit_time,real_iteration,model_name,ddl,batch_size,num_gpu,real_duration,duration,iteration",
                   "0,0,1,vgg16,5,256,1,976570,976570,1", "1,219316,2,bert,9,64,4,1792395,1792395,2")
    assert [(r.cluster, r.row, r.submit_s, r.duration_s, r.gpus) for r in trace_rows(philly)] == [
        ("philly_103959", 0, 0, 976570, 1), ("philly_103959", 1, 219316, 1792395, 4)]
    with pytest.raises(ValueError, match="needs columns"):
        trace_rows(write(tmp_path / "bad.csv", "a,b", "1,2"))


def test_the_shared_traces_read():
    assert len(trace_rows(TRACES / "philly-vc103959" / "philly_103959.csv")) == 876
    first = trace_rows(TRACES / "microsoft-itp-2021" / "cluster01.csv")[0]
    assert (first.cluster, first.row, first.submit_s, first.gpus) == ("cluster01", 0, 1932025, 64)


def test_the_slice_starts_limits_and_leaves_out_big_jobs(traces: Path):
    rows = trace_rows(traces)
    chosen, too_large = select(rows, Slice(start_s=110, limit=2, max_gpus=8))
    assert [(r.cluster, r.row) for r in chosen] == [("cluster02", 0), ("cluster02", 1)]
    assert too_large == 1, "cluster01 row 1 (16 GPUs) is left out before the limit is reached"
    assert select(rows, Slice()) == (rows, 0)


def test_submissions_are_compressed_onto_the_virtual_clock(traces: Path):
    rows = trace_rows(traces)
    jobs = submissions(rows, ["cell-a", "cell-b"], origin_ms=1_000_000)
    assert [(j.job_id, j.envelope.cell, j.at - 1_000_000) for j in jobs] == [
        ("cluster01-0", "cell-a", 0), ("cluster02-0", "cell-b", 10_000), ("cluster01-1", "cell-a", 30_000),
        ("cluster02-1", "cell-b", 30_000), ("cluster01-2", "cell-a", 60_000)]
    assert [(j.workers, j.gpus_per_worker) for j in jobs] == [(1, 1), (1, 8), (2, 8), (1, 2), (8, 8)]
    assert jobs[2].team == "cluster01" and jobs[2].labels == {"duration_ms": "1200000"}
    assert jobs[0].envelope.event_id == "load/cluster01-0", "a rerun writes the same ids: duplicates are rejected"
    later = submissions(rows[2:], ["cell-a"], origin_ms=0, start_s=100)
    assert later[0].at == 30_000, "with --start the clock counts from that trace second"


def test_quotas_share_the_cell_by_gpu_hours():
    assert quota_shares({"a": 3.0, "b": 1.0}, 64) == {"a": 48, "b": 16}
    shares = quota_shares({"a": 1.0, "b": 1.0, "c": 1.0}, 64)
    assert sum(shares.values()) == 64 and sorted(shares.values()) == [21, 21, 22]
    assert quota_shares({"a": 0.0}, 8) == {"a": 0}


def test_team_definitions_per_cell(traces: Path):
    rows = trace_rows(traces)
    events = team_events(rows, ["cell-a"], gpus=100, gpu_type="H100", cohort="trace", at=5)
    assert [type(e).__name__ for e in events] == ["CohortDefined", "TeamDefined", "QuotaSet", "TeamDefined", "QuotaSet"]
    quotas = {e.team: e.nominal for e in events if isinstance(e, m.QuotaSet)}
    # GPU-seconds: cluster01 600 + 19,200 + 3,840 = 23,640; cluster02 28,800 + 1,200 = 30,000.
    assert quotas == {"cluster01": 44, "cluster02": 56}
    assert all(e.team and e.cohort == "trace" for e in events if isinstance(e, m.TeamDefined))
    split = team_events(rows, ["cell-a", "cell-b"], gpus=64, gpu_type="H100", cohort="trace", at=5)
    assert {(e.envelope.cell, e.team, e.nominal) for e in split if isinstance(e, m.QuotaSet)} == {
        ("cell-a", "cluster01", 64), ("cell-b", "cluster02", 64)}


class FakeProducer:
    """Records what each transaction would write (the real producer is tested on a broker)."""

    def __init__(self) -> None:
        self.transactions: list[list[str]] = []

    def write(self, events) -> None:
        self.transactions.append([event.envelope.event_id for event in events])

    def flush(self) -> None:
        pass


def test_play_writes_each_event_once_its_time_has_come(traces: Path):
    clock = VirtualClock.starting_now(speedup=1_000)  # 1 s of trace in 1 ms
    jobs = submissions(trace_rows(traces), ["cell-a"], origin_ms=clock.now_ms())
    producer = FakeProducer()
    assert play(producer, list(jobs), clock) == 5
    assert [i for txn in producer.transactions for i in txn] == [j.envelope.event_id for j in jobs]
    assert len(producer.transactions) >= 3, "written as time passes, not all at once"
