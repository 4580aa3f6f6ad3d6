"""A service process that gave up on a librdkafka call ends once it has stopped in order, even when the interpreter's
finalization would wait for ever (as it did in librdkafka after a stuck send_offsets_to_transaction): here a
finalizer that blocks stands in for librdkafka's. Each case runs in a process of its own."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: A process whose finalization blocks: a cycle whose finalizer sleeps, collected only as the interpreter finalizes.
SCRIPT = """
import logging, sys, time
import events.log
from services.run_cli import leave

class Stuck:
    def __del__(self):
        time.sleep(3600)

stuck = Stuck()
stuck.cycle = stuck
logging.basicConfig(level=logging.INFO)
events.log._abandoned_calls = {abandoned}
logging.getLogger("gangway.test").info("stopped in order")
print("last words", flush=False)
sys.exit(leave(0))
"""


def run(abandoned: int, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SCRIPT.format(abandoned=abandoned)], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def test_after_a_call_given_up_on_the_process_ends_without_finalizing_and_keeps_its_last_words():
    done = run(abandoned=1, timeout=60)
    assert done.returncode == 0
    assert done.stdout == "last words\n"
    assert "stopped in order" in done.stderr


def test_with_no_call_given_up_on_the_process_finalizes_as_usual():
    # the same process without `leave`'s exit: its finalization waits in the finalizer (what `leave` spares)
    with pytest.raises(subprocess.TimeoutExpired):
        run(abandoned=0, timeout=5)
