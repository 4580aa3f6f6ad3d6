"""The `gangway` executable ends a read-only command's process as soon as it has printed its answer
(events/command.py `answered`): the answer is whole and the exit code is the command's, as when it returns."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from replay import cli

ROOT = Path(__file__).resolve().parents[2]
LOG = ROOT / "tests" / "golden" / "demo.avro"
#: Output block-buffered, as a pipe's is by default: what the process has not flushed when it ends is lost.
BUFFERED = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}


@pytest.mark.parametrize("argv", [
    ["replay", "state", "--at", "40", "-o", "json"],
    ["report", "-o", "json"],
    ["verify"],
    ["explain", "no-such-job"],  # a refusal: one line and exit 1, the ordinary way
])
def test_an_audit_run_as_the_executable_answers_as_it_does_in_process(argv, capsys):
    in_process = cli.main([*argv, "--log", str(LOG)])
    expected = capsys.readouterr()
    run = subprocess.run([sys.executable, "-m", "replay.cli", *argv, "--log", str(LOG)], cwd=ROOT, env=BUFFERED,
                         capture_output=True, text=True, timeout=120)
    assert (run.returncode, run.stdout, run.stderr) == (in_process, expected.out, expected.err)
    assert run.stdout or run.stderr


def test_the_answer_reaches_a_pipe_whole():
    """A pipe's buffer is flushed before the process ends: the JSON parses to its last brace."""
    run = subprocess.run(f"{sys.executable} -m replay.cli replay state --at 40 --log {LOG} -o json | cat",
                         shell=True, cwd=ROOT, env=BUFFERED, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.rstrip().endswith("}") and len(run.stdout) > 1000, run.stderr
