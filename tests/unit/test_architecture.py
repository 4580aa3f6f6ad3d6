"""Dependencies point one way (ARCHITECTURE §5) and the pure core stays free of I/O libraries."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IO_LIBRARIES = {"confluent_kafka", "rocksdict", "fastavro", "time", "random", "uuid", "socket", "threading"}
# The shells: modules that talk to Kafka, RocksDB, HTTP, processes or the clock. Everything else in
# projections/ and services/ is the pure core.
SHELL_MODULES = {
    "projections/store.py", "services/shell.py",
    # the intake: reads the input topics and writes the cells' logs (its check, `take_in`, is a pure function)
    "services/intake.py",
    # the read model's RocksDB store and the projector that follows the log into it
    "projections/readmodel/store.py", "projections/readmodel/projector.py",
    "events/clock.py", "services/run_cli.py", "projections/watch.py", "replay/demo.py",
    # The simulated fleet and the trace loader play node agents and launchers, outside the control
    # plane: they read the clock, draw seeded failures and write to Kafka.
    "services/agent/failures.py", "services/agent/fleet_cli.py", "events/load_cli.py",
    # The real node agent runs processes and heartbeats on the wall clock; the launcher SDK and its
    # commands write requests to Kafka and wait on the clock.
    "services/agent/real.py", "services/agent/agent_cli.py", "services/agent/gpu_health.py",
    "services/launcher/client.py", "services/launcher/cli.py",
    # the trace-driven simulator: wall-clock timing, seeded failure draws, files and plots
    "replay/sim/run.py", "replay/sim/cli.py", "replay/sim/report.py",
}


def _imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_layers_are_kept():
    lint_imports = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(lint_imports), "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_named_shell_exists():
    assert sorted(m for m in SHELL_MODULES if not (ROOT / m).exists()) == []


def test_pure_core_imports_no_io_library():
    offenders = {}
    for package in ("projections", "services"):
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative in SHELL_MODULES or "/shell" in relative:
                continue
            bad = _imported_roots(path) & IO_LIBRARIES
            bad |= {"events.codec", "events.log", "events.reader"} & _imported_modules(path)
            if bad:
                offenders[relative] = sorted(bad)
    assert offenders == {}


DECIDERS = ("admitter", "placer", "preemptor", "recovery")


def test_a_decider_imports_no_io_no_clock_no_randomness_and_no_other_decider():
    offenders = {}
    for name in DECIDERS:
        for path in sorted((ROOT / "services" / name).rglob("*.py")):
            modules = _imported_modules(path)
            bad = {module for module in modules if module.split(".")[0] in IO_LIBRARIES}
            bad |= {module for module in modules for other in DECIDERS
                    if other != name and (module == f"services.{other}" or module.startswith(f"services.{other}."))}
            bad |= {"events.codec", "events.log", "events.reader"} & modules
            if bad:
                offenders[path.relative_to(ROOT).as_posix()] = sorted(bad)
    assert offenders == {}


def _imported_modules(path: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module)
        elif isinstance(node, ast.Import):
            modules |= {alias.name for alias in node.names}
    return modules


def test_no_unused_imports_or_undefined_names():
    ruff = Path(sys.executable).with_name("ruff")
    result = subprocess.run([str(ruff), "check", "--quiet", "."], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
