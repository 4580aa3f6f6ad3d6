"""The simulator shell: determinism, the CLI, trace and node reading, quotas, failures and agent costs."""

from __future__ import annotations

import json
import random
import signal
from pathlib import Path

import pytest

from events.traces import TRACES, read_jobs, trace_files
from replay import cli
from replay.sim import workload as sim
from tests.sim.conftest import H, queue_s, run, write_trace


def mixed_trace(folder: Path, jobs: int = 80) -> None:
    """Two teams with a deterministic mix of 1- to 16-GPU jobs over two days."""
    rng = random.Random(7)
    for team in ("vision", "speech"):
        rows = sorted((rng.randrange(0, 2 * 24 * H), rng.randrange(600, 6 * H), rng.choice([1, 1, 1, 2, 4, 8, 16]))
                      for _ in range(jobs // 2))
        write_trace(folder, team, rows)


def sim_cli(*args: str) -> int:
    return cli.main(["sim", *args, "--no-progress"])


def test_sim_is_a_gangway_subcommand():
    assert "sim" in [name for name, _, _ in cli.SUBCOMMANDS]


def test_same_seed_gives_the_same_result_json_byte_for_byte(traces, tmp_path, capsys):
    mixed_trace(traces)
    outs = [tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"]
    common = ["--trace", str(traces), "--gpus", "48", "--failures-per-1000-gpu-days", "2000", "--repair-h", "2"]
    assert sim_cli(*common, "--seed", "3", "--json", str(outs[0])) == 0
    assert sim_cli(*common, "--seed", "3", "--json", str(outs[1])) == 0
    assert sim_cli(*common, "--seed", "4", "--json", str(outs[2])) == 0
    assert outs[0].read_bytes() == outs[1].read_bytes()
    assert outs[0].read_bytes() != outs[2].read_bytes()  # other failures
    result = json.loads(outs[0].read_text())
    assert result["metrics"]["gpu_failures"] > 0 and result["metrics"]["interruptions"] > 0
    assert result["metrics"]["succeeded"] + result["metrics"]["failed"] == result["metrics"]["jobs"] == 80


def test_result_json_has_the_documented_fields(traces, tmp_path, capsys):
    mixed_trace(traces)
    out = tmp_path / "r.json"
    assert sim_cli("--trace", str(traces), "--gpus", "48", "--policy", "backfill", "--json", str(out)) == 0
    result = json.loads(out.read_text())
    assert {"policy", "trace", "cluster", "metrics"} <= set(result)
    assert result["policy"]["name"] == "backfill" and result["policy"]["version"] == "backfill-1"
    assert result["cluster"]["gpus"] == 48 and result["cluster"]["nodes"] == 6
    metrics = result["metrics"]
    for key in ("jobs", "avg_jct_s", "p50_jct_s", "p99_jct_s", "avg_queue_s", "p99_queue_s", "makespan_s",
                "utilization", "idle_while_waiting", "preemptions", "gpu_hours_lost", "effective_training_ratio",
                "multi_node_gangs_in_one_rack", "per_team"):
        assert key in metrics, key
    assert set(metrics["per_team"]) == {"vision", "speech"}
    for entry in metrics["per_team"].values():
        assert entry["private_avg_queue_s"] is not None and "avg_queue_s" in entry
    assert 0 < metrics["utilization"] <= 1 and 0 <= metrics["idle_while_waiting"] <= 1
    assert metrics["p50_jct_s"] <= metrics["p99_jct_s"]
    assert "| backfill |" in capsys.readouterr().out


def test_compare_prints_one_table_and_writes_the_report(traces, tmp_path, capsys):
    mixed_trace(traces, jobs=40)
    report = tmp_path / "report"
    out = tmp_path / "compare.json"
    assert sim_cli("compare", "--trace", str(traces), "--gpus", "48", "--no-private", "--json", str(out),
                   "--report", str(report)) == 0
    printed = capsys.readouterr().out
    for name in ("gangway", "fifo", "static", "kueue-like", "backfill"):
        assert f"| {name} |" in printed
    assert [r["policy"]["name"] for r in json.loads(out.read_text())["compare"]] == [
        "gangway", "fifo", "static", "kueue-like", "backfill", "tiresias"]
    assert {p.name for p in report.iterdir()} == {"report.md", "jct_cdf.png", "team_queue.png", "gpus_in_use.png"}
    assert (report / "jct_cdf.png").read_bytes()[:4] == b"\x89PNG"


def test_bad_input_is_refused_with_a_message(traces, tmp_path, capsys):
    mixed_trace(traces, jobs=4)
    assert sim_cli("--trace", str(traces), "--gpus", "16", "--policy", "slurm") == 1
    assert "unknown policy 'slurm'" in capsys.readouterr().err
    assert sim_cli("--trace", str(traces), "--gpus", "16", "--policy", "gangway-1+admission.nope=1") == 1
    assert "unknown knob policy.admission.nope" in capsys.readouterr().err
    assert sim_cli("--trace", str(tmp_path / "nothing.csv"), "--gpus", "16") == 1
    assert "no trace at" in capsys.readouterr().err
    assert sim_cli("--trace", str(traces)) == 2
    assert sim_cli("--trace", str(traces), "--gpus", "8") == 1  # two teams with 16-GPU jobs need two nodes each
    assert "cannot give every team its largest job" in capsys.readouterr().err


def test_reads_itp_and_philly_traces_and_folders():
    itp = trace_files(TRACES / "microsoft-itp-2021")
    assert [p.stem for p in itp] == ["cluster01", "cluster02", "cluster03", "cluster04", "cluster05", "cluster07",
                                     "cluster08", "cluster09"]
    philly = read_jobs(trace_files(TRACES / "philly-vc103959"))
    assert len(philly) == 876 and {j.cluster for j in philly} == {"philly_103959"}
    assert {j.gpus for j in philly} == {1, 2, 4}
    assert [j.submit_s for j in philly] == sorted(j.submit_s for j in philly)


def test_gpus_as_a_multiple_of_the_average_demand(traces):
    write_trace(traces, "solo", [(0, 1000, 8), (1000, 1000, 8)])  # 16,000 GPU-s over 1,000 s: 16 GPUs on average
    workload = sim.build_workload([traces], sim.SimConfig(gpus="1.5x"))
    assert sum(n.gpus for n in workload.nodes) == 24


def test_heterogeneous_cell_from_the_alibaba_node_list(traces):
    write_trace(traces, "solo", [(0, 600, 1), (10, 600, 8), (20, 600, 2)])
    config = sim.SimConfig(nodes_csv=str(TRACES / "alibaba-gpu-2023-openb" / "openb_node_list_all_node.csv"))
    workload = sim.build_workload([traces], config)
    assert workload.capacity() == {"A10": 2, "G2": 4392, "G3": 312, "P100": 265, "T4": 842, "V100M16": 195,
                                   "V100M32": 204}
    assert sum(workload.quotas["solo"].values()) <= 6212
    for job in workload.jobs:
        assert job.workers * job.gpus_per_worker == job.gpus


def test_nominal_quotas_follow_demand_in_whole_nodes_with_the_largest_job_as_floor():
    quotas = sim.nominal_quotas({"a": 600, "b": 300, "c": 100}, {"a": 8, "b": 8, "c": 64}, capacity=160, unit=8)
    assert quotas["c"] == 64  # its share (16) is smaller than its largest job
    assert sum(quotas.values()) == 160
    assert quotas == {"a": 64, "b": 32, "c": 64}
    with pytest.raises(ValueError, match="largest job"):
        sim.nominal_quotas({"a": 1, "b": 1}, {"a": 16, "b": 16}, capacity=24, unit=8)


def test_gpu_failures_are_a_seeded_poisson_process():
    nodes = sim.uniform_nodes(1000)
    days = 100
    failures = sim.gpu_failures(nodes, 0, days * sim.DAY_MS, 0.5, seed=1)
    assert failures == sim.gpu_failures(nodes, 0, days * sim.DAY_MS, 0.5, seed=1)
    assert failures != sim.gpu_failures(nodes, 0, days * sim.DAY_MS, 0.5, seed=2)
    assert 30 <= len(failures) <= 75  # 1,000 GPUs x 100 days x 0.5 / 1,000 = 50 expected
    assert all(at < days * sim.DAY_MS for at, *_ in failures)
    assert {xid for *_, xid in failures} <= set(sim.FAILURE_XIDS)


def test_checkpoint_pauses_lengthen_the_job(traces):
    write_trace(traces, "solo", [(0, 2 * H, 8)])
    _, outcome = run(traces, "gangway", 8, checkpoint_every_s=1800, checkpoint_cost_s=60)
    # checkpoints at 30, 60 and 90 minutes of training pause it 60 s each
    assert outcome.per_job["solo-00000"] == ("succeeded", 0.0, 2 * H + 3 * 60)


def test_a_preempted_job_pays_the_restart_cost(traces):
    write_trace(traces, "borrower", [(0, 10 * H, 8), (0, 10 * H, 8)])
    write_trace(traces, "lender", [(3010, H, 8)])
    _, plain = run(traces, "gangway", 16)
    _, costly = run(traces, "gangway", 16, restart_cost_s=300)
    victim = "borrower-00000"
    assert costly.per_job[victim][2] == plain.per_job[victim][2] + 300


def test_failed_hardware_interrupts_the_job_and_comes_back(traces):
    write_trace(traces, "solo", [(0, 20 * H, 8), (0, 20 * H, 8)])
    result, outcome = run(traces, "gangway", 16, failures_per_1000_gpu_days=20_000, repair_s=3600, seed=5)
    metrics = result["metrics"]
    assert metrics["gpu_failures"] > 0 and metrics["interruptions"] > 0
    assert metrics["succeeded"] + metrics["failed"] == 2
    assert metrics["effective_training_ratio"] < 1


def test_queue_time_counts_every_wait(traces):
    write_trace(traces, "solo", [(0, H, 8), (60, H, 8)])
    waits = queue_s(traces, "fifo", 8)
    assert waits == {"solo-00000": 0, "solo-00001": H - 60}


@pytest.mark.pure  # patches the core's source (tests/conftest.py)
def test_a_decider_that_fails_stops_the_run_with_its_error(traces, tmp_path, capsys, monkeypatch):
    """A cell answers a decider's exception with a refusal and carries on; a simulation would then measure a broken
    decider (and, with nothing ever admitted, tick for ever): it stops at the first such refusal and says why."""
    from services.admitter.decide import Admitter

    def broken(self, state, event, ctx):
        raise NameError("name 'knob' is not defined")

    class Endless(BaseException):  # not an Exception: the cell answers those with a refusal and goes on
        pass

    def endless(signum, frame):
        raise Endless("the run went on ticking after its decider failed")

    mixed_trace(traces, jobs=4)
    monkeypatch.setattr(Admitter, "decide", broken)
    previous = signal.signal(signal.SIGALRM, endless)
    signal.alarm(60)
    try:
        assert sim_cli("--trace", str(traces), "--gpus", "48", "--json", str(tmp_path / "r.json")) == 1
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    err = capsys.readouterr().err
    assert "the admitter failed on the record at offset" in err and "DECISION_FAILED" in err
    assert "name 'knob' is not defined" in err and "measures nothing" in err
    assert not (tmp_path / "r.json").exists()
