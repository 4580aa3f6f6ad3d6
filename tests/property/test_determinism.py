"""Same inputs, same decisions: the decision log is byte-identical under different hash seeds."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _digest(hash_seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-m", "tests.property.decision_log_hash"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_decision_logs_are_byte_identical_under_different_hash_seeds():
    first, second = _digest("0"), _digest("2718281")
    assert first == second
    assert int(first.split()[1]) > 1500  # the runs decided plenty
