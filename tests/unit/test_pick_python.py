"""compose/pick_python.py: the virtualenv is made from a Python 3.11+ with venv, preferring its headers, then one not
on a shared libpython, then the first found."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("pick_python", ROOT / "compose" / "pick_python.py")
pick = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pick)


def python(version=(3, 11), venv=True, shared=False, headers=True) -> dict:
    return {"version": list(version), "venv": venv, "shared": shared, "headers": headers}


def test_a_static_interpreter_is_preferred_to_one_on_a_shared_libpython():
    assert pick.choose([("/pyenv/python3", python(shared=True)), ("/usr/bin/python3", python())]) == "/usr/bin/python3"


def test_headers_come_before_a_static_interpreter():
    facts = [("/usr/bin/python3", python(headers=False)), ("/pyenv/python3", python(shared=True))]
    assert pick.choose(facts) == "/pyenv/python3"


def test_of_equals_the_first_found_wins():
    assert pick.choose([("/a/python3", python((3, 12))), ("/b/python3", python())]) == "/a/python3"


def test_too_old_without_venv_or_not_running_is_never_chosen():
    facts = [("/old", python((3, 10))), ("/novenv", python(venv=False)), ("/broken", None),
             ("/ok", python(shared=True, headers=False))]
    assert pick.choose(facts) == "/ok"
    assert pick.choose(facts[:3]) is None


def test_the_probe_describes_the_running_interpreter():
    facts = pick.probe(sys.executable)
    assert facts is not None and tuple(facts["version"]) == sys.version_info[:2]
    assert pick.probe("/nonexistent/python3") is None


def test_the_script_prints_an_interpreter_that_runs():
    chosen = subprocess.run([sys.executable, str(ROOT / "compose" / "pick_python.py")], capture_output=True,
                            text=True, check=True).stdout.strip()
    assert subprocess.run([chosen, "-c", "import sys; assert sys.version_info >= (3, 11)"]).returncode == 0
