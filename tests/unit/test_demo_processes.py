"""`gangway demo` notices a process of its own that ended: the load may end once it has written its slice, every other
process runs until the demo stops it. A run whose load failed (say, its teams never reached the log) stops and
says so, instead of showing an empty cell and exiting 0."""

import argparse
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from events.clock import VirtualClock
from events.topics import topic_names
from replay.demo import Demo, add_arguments


def demo(tmp_path: Path) -> Demo:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--api-port", "0"])
    return Demo(args, "127.0.0.1:1", topic_names("t."), {}, tmp_path, VirtualClock.anchored(1, 0.0),
                tokens={"operator": "x", "teams": {}})


def child(demo: Demo, name: str, code: int | None, last_line: str = "") -> None:
    """A real process in the demo's children: one that ends with `code`, or runs on (None)."""
    (demo.state_dir / f"{name}.log").write_text(f"started\n{last_line}\n\n")
    script = "import time; time.sleep(60)" if code is None else f"import sys; sys.exit({code})"
    demo.children[name] = subprocess.Popen([sys.executable, "-c", script])
    if code is not None:
        demo.children[name].wait()


@pytest.fixture
def d(tmp_path: Path) -> Iterator[Demo]:
    the_demo = demo(tmp_path)
    yield the_demo
    the_demo.stop()


def test_every_process_still_running_is_no_failure(d):
    for name in ("api", "services", "fleet", "load"):
        child(d, name, None)
    assert d.failed() == ""


def test_a_load_that_wrote_its_slice_and_ended_is_no_failure(d):
    child(d, "services", None)
    child(d, "load", 0)
    assert d.failed() == ""


def test_a_load_that_failed_is_named_with_its_last_words(d, tmp_path):
    child(d, "services", None)
    child(d, "load", 1, "gangway load: 1 team definitions are not on the log after 30 s")
    failed = d.failed()
    assert failed.startswith("load exited with 1 (")
    assert str(tmp_path / "load.log") in failed
    assert failed.endswith(": gangway load: 1 team definitions are not on the log after 30 s)")


def test_a_service_process_that_ended_at_all_is_a_failure(d):
    child(d, "load", None)
    child(d, "services", 0)
    assert d.failed().startswith("services exited with 0")
