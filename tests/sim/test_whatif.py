"""`gangway whatif` on a simulated cell's log: re-driven under the policy that made it, it is what happened (the
agents' timing and each job's training time are read back from the log's worker facts)."""

from __future__ import annotations

import random

from replay.audit import whatif
from replay.audit.policy import recorded
from replay.sim import workload
from replay.sim.run import simulate
from services.policies import FIFO, GANGWAY
from tests.sim.conftest import H, write_trace


def simulated(traces) -> list:
    rng = random.Random(5)
    for team in ("vision", "speech"):
        jobs = [(rng.randrange(0, 24 * H), rng.randrange(600, 5 * H), rng.choice([1, 4, 8, 16])) for _ in range(40)]
        write_trace(traces, team, sorted(jobs))
    config = workload.SimConfig(gpus=32, private=False, failures_per_1000_gpu_days=3000, repair_s=2 * H)
    records: list = []
    simulate(workload.build_workload([traces], config), GANGWAY, config,
             observers=[lambda cell, event, offset: records.append((offset, event))])
    return records


def test_a_simulated_log_re_driven_under_its_own_policy_is_what_happened(traces):
    records = simulated(traces)
    comparison = whatif.compare(records, "sim", recorded(records))
    assert comparison.recorded["succeeded"] > 0 and comparison.recorded["gpu_hours_lost"] > 0  # failures hit work
    assert comparison.whatif == comparison.recorded and comparison.movers == []
    timing = whatif.calibrated([e for _, e in records])
    config = workload.SimConfig()
    assert (timing.checkpoint_every_ms, timing.checkpoint_cost_ms, timing.restart_cost_ms) == (
        config.checkpoint_every_s * 1000, config.checkpoint_cost_s * 1000, config.restart_cost_s * 1000)


def test_fifo_re_driven_over_the_same_inputs_waits_longer(traces):
    records = simulated(traces)
    comparison = whatif.compare(records, "sim", FIFO)
    assert comparison.whatif["avg_queue_s"] > comparison.recorded["avg_queue_s"]
    assert comparison.movers
