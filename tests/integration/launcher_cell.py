"""A cell for launcher tests on a real broker: the four services and the clock, real node agents (processes),
teams applied through the SDK, and what tests need to look at the workers' processes and the training's output."""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

import numpy as np

from events.launcher.spec import Job, parse_document
from services.launcher import Client
from tests.integration.control_plane import ControlPlane

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "examples" / "train.py"
TEAMS = ROOT / "examples" / "teams.yaml"


def load_train():
    """examples/train.py as a module, for its reference run."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gangway_example_train", TRAIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class LauncherCell:
    """Services, clock and agents as processes; `client` reads and writes the cell like a user would."""

    def __init__(self, bootstrap: str, tmp_path: Path, speedup: float, nodes: tuple[str, ...]) -> None:
        self.tmp, self.speedup, self.nodes = tmp_path, speedup, nodes
        self.killed: set[str] = set()  # processes killed with -9 and not started again
        # 30 s of silence would be 1 s of wall time at 30x, which a loaded machine's agents miss: 5 s of wall time;
        # never under 30 s of event time, which a restarted agent (a new process reading the log first) needs
        timeout_ms = max(30_000, int(150_000 * speedup / 30))
        self.plane = ControlPlane(bootstrap, tmp_path, policy=f"gangway-2+recovery.heartbeat_timeout_ms={timeout_ms}")
        self.plane.start_all()
        try:  # a cell that never comes up stops its processes: no fixture knows of it yet
            self.plane.command("clock", "run", "clock", "--tick-interval", "0.2", "--speedup", str(speedup))
            for node in nodes:
                self.start_agent(node)
            self.client = Client(bootstrap)
            # Registering takes ~4 s here, under load too; the margin is for a broker slow to form a new group.
            deadline = time.monotonic() + 120
            while len(self.client.nodes()) < len(nodes):
                assert time.monotonic() < deadline, f"the agents did not register\n{self.plane.tails(20)}"
                time.sleep(0.3)
            self.client.apply([TEAMS])
        except BaseException:
            self.plane.stop_all()
            raise

    def start_agent(self, node: str) -> None:
        self.killed.discard(f"agent-{node}")
        self.plane.command(f"agent-{node}", "agent", "--node", node, "--gpus", "1", "--gpu-type", "CPU", "--rack", "r1",
                           "--block", "b1", "--work-dir", str(self.work_dir(node)), "--speedup", str(self.speedup),
                           "--heartbeat-every", "2s",
                           "--stop-grace", "3s", "-v")

    def kill_agent(self, node: str) -> None:
        self.plane.kill(f"agent-{node}")
        self.killed.add(f"agent-{node}")

    def work_dir(self, node: str) -> Path:
        return self.tmp / "agents" / node

    def job(self, name: str, team: str, steps: int, *, priority: str | None = None, extra: tuple[str, ...] = (),
            workers: int = 2) -> Job:
        spec = {"workers": workers, "gpus_per_worker": 1, "gpu_type": "CPU",
                "command": [sys.executable, str(TRAIN)],
                "args": ["--steps", str(steps), "--step-time", "0.02", "--checkpoint-every", "100", *extra],
                "checkpoint_dir": str(self.tmp / "checkpoints" / name), "working_dir": str(self.tmp)}
        if priority:
            spec["priority_class"] = priority
        return parse_document({"kind": "Job", "metadata": {"name": name, "team": team}, "spec": spec}, name)

    def wait(self, job_id: str, until, timeout: float = 90.0):
        try:
            return self.client.wait(job_id, until, timeout=timeout)
        except TimeoutError as error:
            raise AssertionError(f"{error}\n{self.describe()}") from None

    def final_weights(self, job_id: str) -> np.ndarray:
        return np.load(self.tmp / "checkpoints" / job_id / "final.npy")

    def processes(self, job_id: str) -> dict[tuple[str, str, str], bool]:
        """Every worker process the agents ever started for the job: (node, attempt, worker) -> still running."""
        out = {}
        for node in self.nodes:
            for pid_file in sorted(self.work_dir(node).glob(f"jobs/{job_id}/a*/w*/pid")):
                info = json.loads(pid_file.read_text())
                out[(node, pid_file.parent.parent.name, pid_file.parent.name)] = _running(info["pid"], info["start"])
        return out

    def gpus_held_by(self, job_id: str) -> list[str]:
        return [n.node for n in self.client.nodes() if job_id in n.jobs]

    def describe(self) -> str:
        lines = [f"{j.job_id}: {j.state} {j.reason} {j.detail} attempts {j.attempts}"
                 for j in self.client.list(include_ended=True)]
        return "\n".join(lines)

    def stop(self) -> dict[str, int]:
        """Stops every process; the exit codes of those not killed on purpose."""
        self.client.close()
        exits = {name: code for name, code in self.plane.stop_all().items() if name not in self.killed}
        for node in self.nodes:  # nothing the tests started may outlive them
            for pid_file in self.work_dir(node).glob("jobs/*/a*/w*/pid"):
                info = json.loads(pid_file.read_text())
                if _running(info["pid"], info["start"]):
                    _kill_group(info["pid"])
        return exits


def _running(pid: int, start: str) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = stat[stat.rfind(")") + 2:].split()
    return fields[0] != "Z" and fields[19] == start


def _kill_group(pid: int) -> None:
    import os

    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
