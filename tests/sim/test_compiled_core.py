"""The compiled core (events/compiled.py) decides exactly as its source: one simulation run both ways, each in a
process of its own, gives the same result JSON byte for byte; a build that no longer matches its sources is not
loaded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from events import compiled
from events.traces import TRACES
from services.policy import DEFAULT_POLICY

ROOT = Path(__file__).resolve().parents[2]


def _env(pure: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "GANGWAY_PURE"}
    return {**env, "GANGWAY_PURE": "1"} if pure else env


def _core(pure: bool, first: str = "projections") -> str:
    """How a fresh process that imports `first` before anything else runs the core: 'compiled' or 'pure'."""
    return subprocess.run([sys.executable, "-c", f"import {first}, events.compiled as c, sys; "
                           "print('compiled' if c.install() == 'compiled' and all(type(sys.modules[n].__loader__).__name__ == "
                           "'ExtensionFileLoader' for n in c.MODULES if n in sys.modules) else 'pure')"],
                          cwd=ROOT, env=_env(pure), capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.parametrize("first", ["projections", "services.core.replica", "replay.runner", "replay.sim.metrics",
                                   "services.agent.simulated", "tests.builders", "replay.cli"])
def test_whichever_module_a_process_imports_first_the_whole_core_is_compiled(first):
    assert _core(pure=False, first=first) == "compiled"


def _simulate(policy: str, pure: bool, out: Path) -> bytes:
    trace = TRACES / "microsoft-itp-2021" / "cluster02.csv"
    subprocess.run([sys.executable, "-m", "replay.cli", "sim", "run", "--trace", str(trace), "--gpus", "1.2x",
                    "--no-private", "--seed", "3", "--limit", "1500", "--policy", policy, "--no-progress",
                    "--json", str(out)],
                   cwd=ROOT, env=_env(pure), capture_output=True, check=True)
    return out.read_bytes()


@pytest.mark.parametrize("policy", [
    "gangway", "kueue-like",
    f'{DEFAULT_POLICY.version}+admission.least_attained_service=true+preemption.time_share="WithinTeam"',
])
def test_the_compiled_core_decides_as_its_source(policy, tmp_path):
    assert _core(pure=True) == "pure"
    assert _core(pure=False) == "compiled", (
        f"the compiled core is {compiled.status()}: build it with `python compose/compile_core.py` "
        "(compose/bootstrap.sh does, where a C compiler is found)")
    from_source = _simulate(policy, True, tmp_path / "pure.json")
    assert _simulate(policy, False, tmp_path / "compiled.json") == from_source
    result = json.loads(from_source)["metrics"]
    assert result["succeeded"] > 1000  # a run that decided a good deal


def test_a_build_is_loaded_only_while_it_matches_its_sources(tmp_path, monkeypatch):
    monkeypatch.delenv("GANGWAY_PURE", raising=False)
    monkeypatch.setattr(compiled, "BUILD", tmp_path)
    monkeypatch.setattr(compiled, "MANIFEST", tmp_path / "manifest.json")
    assert compiled.status() == "absent"
    (tmp_path / "core.so").write_bytes(b"")
    (tmp_path / "manifest.json").write_text(json.dumps({"digest": compiled.digest(), "files": {"m": "core.so"}}))
    assert compiled.status() == "compiled"
    (tmp_path / "manifest.json").write_text(json.dumps({"digest": "0" * 64, "files": {"m": "core.so"}}))
    assert compiled.status() == "stale"  # a source edited since the build
    (tmp_path / "manifest.json").write_text(json.dumps({"digest": compiled.digest(), "files": {"m": "gone.so"}}))
    assert compiled.status() == "stale"
    monkeypatch.setenv("GANGWAY_PURE", "1")
    assert compiled.status() == "pure"


@pytest.mark.parametrize("module", compiled.MODULES)
def test_each_compiled_module_has_its_source(module):
    assert compiled.source_of(module).is_file()
