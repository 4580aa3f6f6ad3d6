"""Helpers for simulator tests: hand-made ITP-format traces written to a temporary folder."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest

from replay.sim import workload
from replay.sim.run import RunOutcome, simulate
from replay.sim.run import run as run_policy
from services.policies import resolve

#: No failures and no checkpoint, restart or start-up costs unless a test asks: outcomes are known in advance.
QUIET = workload.SimConfig(failures_per_1000_gpu_days=0.0, checkpoint_cost_s=0, restart_cost_s=0, start_delay_s=0,
                      private=False)
H = 3600


def write_trace(folder: Path, team: str, jobs: Iterable[tuple[int, int, int]]) -> Path:
    """An ITP-format CSV `<team>.csv` of (submit s, duration s, GPUs) rows; its jobs are `<team>-00000`, ..."""
    path = folder / f"{team}.csv"
    lines = ["job_id,submission_time,duration,num_gpu"]
    lines += [f"{team}-{i},{submit},{duration},{gpus}" for i, (submit, duration, gpus) in enumerate(jobs)]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def traces(tmp_path: Path) -> Path:
    folder = tmp_path / "traces"
    folder.mkdir()
    return folder


def run(folder: Path, policy: str, gpus: int, **config) -> tuple[dict, RunOutcome]:
    """(result JSON, outcome with per-job figures) of one policy on the traces in `folder`."""
    cfg = workload.with_config(QUIET, gpus=gpus, **config)
    return run_policy(workload.build_workload([folder], cfg), policy, cfg)


def queue_s(folder: Path, policy: str, gpus: int, **config) -> dict[str, float | None]:
    """Each job's queueing delay in seconds (None if it did not succeed)."""
    cfg = workload.with_config(QUIET, gpus=gpus, **config)
    outcome = simulate(workload.build_workload([folder], cfg), resolve(policy), cfg)
    return {job_id: waited for job_id, (_, waited, _) in outcome.per_job.items()}
