"""The real node agent's logic on a log made by the deciders (no broker), with real processes: the
environment a distributed trainer expects, rank 0's checkpoint reports, exit codes, and an agent that
takes over from another one adopting the running worker, then stopping it when the job is cancelled."""

from __future__ import annotations

import time
from pathlib import Path

from events import models as m
from services.agent.real import AgentConfig, NodeAgent
from tests.builders import env, fold, job, node, quota, team, topology

REPORT = ('env | grep -E "^(RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|MASTER_ADDR|MASTER_PORT|CUDA_VISIBLE_DEVICES'
          '|GANGWAY_[A-Z_]+)=" | sort > "$GANGWAY_CHECKPOINT_DIR/env-$RANK"; echo \'{"step": 7}\' >> '
          '"$GANGWAY_CHECKPOINT_REPORT"; echo not-json >> "$GANGWAY_CHECKPOINT_REPORT"; exit 3')


def placed_log(command: list[str], checkpoints: Path, job_id: str = "train") -> list[m.Event]:
    registered = node("n1", gpus=4, block="b1", rack="r1").model_copy(update={"address": "127.0.0.9"})
    cell = fold(topology("block", "rack"), registered, team("nlp"), quota("nlp", 8),
                job(job_id, workers=2, gpus=2, command=command, checkpoint_dir=str(checkpoints)))
    assert any(isinstance(e, m.JobPlaced) for e in cell.log)
    return cell.log


def agent_on(log: list[m.Event], work_dir: Path) -> NodeAgent:
    agent = NodeAgent(AgentConfig("n1", 4, "H100", "r1", "b1", work_dir, stop_grace_s=2), "test-cell")
    for offset, event in enumerate(log):
        agent.observe(offset, event, 0, live=False)
    agent.start(1_000)
    return agent


def run_until(agent: NodeAgent, done, timeout: float = 15.0) -> list[m.Event]:
    out: list[m.Event] = []
    deadline = time.monotonic() + timeout
    while not done(out):
        assert time.monotonic() < deadline, [type(e).__name__ for e in out]
        agent.step(2_000)
        out += [e for e, heartbeat in agent.drain() if not heartbeat]
        time.sleep(0.05)
    return out


def exits(events: list[m.Event]) -> list[m.WorkerExited]:
    return [e for e in events if isinstance(e, m.WorkerExited)]


def test_placed_workers_run_with_the_trainer_environment_and_report(tmp_path: Path):
    log = placed_log(["sh", "-c", REPORT], tmp_path)
    agent = agent_on(log, tmp_path / "n1")
    events = [e for e, _ in agent.drain()] + run_until(agent, lambda out: len(exits(out)) == 2)
    assert isinstance(events[0], m.NodeRegistered) and events[0].labels == {"block": "b1", "rack": "r1"}
    assert sorted((e.worker, e.attempt) for e in events if isinstance(e, m.WorkerStarted)) == [(0, 1), (1, 1)]
    assert sorted((e.worker, e.exit_code) for e in exits(events)) == [(0, 3), (1, 3)]
    checkpoints = [e for e in events if isinstance(e, m.CheckpointCompleted)]
    assert [(c.step, c.checkpoint_id) for c in checkpoints] == [(7, "train/a1/step-7")], "rank 0 speaks for the job"
    envs = [dict(line.split("=", 1) for line in (tmp_path / f"env-{rank}").read_text().splitlines()) for rank in (0, 1)]
    assert [(e["RANK"], e["WORLD_SIZE"], e["LOCAL_RANK"], e["LOCAL_WORLD_SIZE"]) for e in envs] == [
        ("0", "2", "0", "2"), ("1", "2", "1", "2")]
    assert {e["MASTER_ADDR"] for e in envs} == {"127.0.0.9"}
    port = {e["MASTER_PORT"] for e in envs}
    assert len(port) == 1 and 20_000 <= int(port.pop()) < 32_000, "below the ephemeral ports"
    gpus = [set(e["CUDA_VISIBLE_DEVICES"].split(",")) for e in envs]
    assert len(gpus[0]) == len(gpus[1]) == 2 and not gpus[0] & gpus[1]
    assert all((e["GANGWAY_JOB_ID"], e["GANGWAY_ATTEMPT"], e["GANGWAY_RESUME_STEP"], e["GANGWAY_NODE"])
               == ("train", "1", "0", "n1") for e in envs)
    assert envs[0]["GANGWAY_CHECKPOINT_DIR"] == str(tmp_path)
    assert (tmp_path / "n1" / "jobs" / "train" / "a1" / "w0" / "stdout.log").exists()


def test_a_gangs_port_is_below_the_ephemeral_ports_and_a_function_of_the_job_alone(tmp_path: Path):
    """Linux hands out 32768-60999 to outgoing connections (net.ipv4.ip_local_port_range): a rendezvous port in
    there can already be held by one of them. Every node of a gang derives the same port from the job and attempt."""
    config = AgentConfig("n1", 4, "H100", "r1", "b1", tmp_path / "n1")
    assert 1024 <= config.port_base and config.port_base + config.port_span <= 32_768
    other = NodeAgent(AgentConfig("n2", 4, "H100", "r2", "b2", tmp_path / "n2"), "test-cell")
    agent = NodeAgent(config, "test-cell")
    ports = {(job_id, attempt): agent._master_port(job_id, attempt)
             for job_id in [f"job-{i}" for i in range(2000)] + ["train", "a" * 200] for attempt in (1, 2, 3)}
    assert all(config.port_base <= port < config.port_base + config.port_span for port in ports.values())
    assert all(other._master_port(*key) == port for key, port in ports.items()), "the same on every node"
    assert len(set(ports.values())) > 1000, "spread over the range"


def test_a_new_agent_adopts_the_running_worker_and_stops_it_on_cancel(tmp_path: Path):
    log = placed_log(["sleep", "60"], tmp_path)
    first = agent_on(log, tmp_path / "n1")
    started = run_until(first, lambda out: sum(isinstance(e, m.WorkerStarted) for e in out) == 2)
    pids = [w.pid for w in first.workers.values()]
    log = log + started  # what the first agent reported is on the log when the second one reads it

    second = agent_on(log, tmp_path / "n1")
    second.step(3_000)
    assert [e for e, _ in second.drain() if isinstance(e, m.WorkerStarted | m.WorkerExited)] == [], \
        "adopted: nothing started twice, nothing reported lost"
    assert sorted(w.pid for w in second.workers.values()) == sorted(pids)

    cancelled = m.JobCancelled(envelope=env(4_000, "admitter", "cancel"), job_id="train")
    second.observe(len(log), cancelled, 4_000)
    stopped = run_until(second, lambda out: len(exits(out)) == 2)
    assert sorted(e.exit_code for e in exits(stopped)) == [143, 143], "SIGTERM, recorded by the shim"
    assert all(not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
               for pid in pids)


def test_a_job_id_that_is_no_plain_name_stays_inside_the_work_directory(tmp_path: Path):
    """The launcher writes only plain names, but the log may hold any id (a foreign writer's): a worker's directory
    is named by the id's digest then, and an agent that takes over still knows whose worker it is."""
    hostile = "../../escaped"
    log = placed_log(["sleep", "60"], tmp_path, job_id=hostile)
    first = agent_on(log, tmp_path / "work" / "n1")
    started = run_until(first, lambda out: sum(isinstance(e, m.WorkerStarted) for e in out) == 2)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.iterdir()) == [Path("work")], "nothing outside it"
    (directory,) = (tmp_path / "work" / "n1" / "jobs").iterdir()
    assert directory.name.startswith("id-") and (directory / "a1" / "w0" / "pid").exists()

    second = agent_on(log + started, tmp_path / "work" / "n1")
    second.step(3_000)
    assert [e for e, _ in second.drain() if isinstance(e, m.WorkerStarted | m.WorkerExited)] == [], "adopted"
    assert sorted(second.workers) == [(hostile, 1, 0), (hostile, 1, 1)]
    second.observe(len(log) + len(started), m.JobCancelled(envelope=env(4_000, "admitter", "cancel"), job_id=hostile),
                   4_000)
    assert sorted(e.exit_code for e in exits(run_until(second, lambda out: len(exits(out)) == 2))) == [143, 143]
