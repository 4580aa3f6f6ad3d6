"""The README's main command, shortened: `gangway demo` runs every process on the real broker and
ends with a summary in which work was placed, a node failed and its jobs were requeued."""

from pathlib import Path

import pytest

from projections.readmodel.store import ReadModelStore
from replay.cli import main
from replay.demo import Demo

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

#: The demo's --duration here: the most it may take to show what the test asks for. It stops as soon as that is
#: there (and the reclaim gang, due at 0.4 of the duration, is submitted): about 50 s on an idle machine.
DEADLINE_S = 120


def seen_enough(demo: Demo) -> bool:
    """What the summary is checked for below has happened, and the demo's every step (the reclaim too) has run."""
    decided = demo.view.decided
    return (len(demo.first_placed) > 50 and decided["NodeFailed"] >= 1 and decided["JobRequeued"] >= 1
            and demo.reclaim is not None)


def tails(state_dir: Path, lines: int = 15) -> str:
    """The last lines of every demo process's log, for an assertion's message."""
    return "\n".join(f"--- {log.name}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
                     for log in sorted(state_dir.glob("*/*.log")))


def test_the_demo_runs_end_to_end(kafka_bootstrap, tmp_path, capsys, monkeypatch):
    # A run of a fixed 45 s could end before a loaded machine had started the processes, registered the 40 nodes,
    # placed the work and lost the node 4 event-minutes in: the demo runs until all that was seen, at most DEADLINE_S.
    show = Demo._show

    def show_and_stop_once_seen(demo: Demo, elapsed: float) -> None:  # called about once a second
        show(demo, elapsed)
        if seen_enough(demo):
            demo.stopping = True  # as Ctrl-C does: a clean stop, then the summary

    monkeypatch.setattr(Demo, "_show", show_and_stop_once_seen)
    code = main(["demo", "--duration", str(DEADLINE_S), "--speedup", "15", "--node-failure-at", "4",
                 "--bootstrap-servers", kafka_bootstrap,
                 "--state-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    summary = out.split("summary")[-1]
    placed = int(summary.split("placed ")[1].split(",")[0])
    assert placed > 50, (summary, tails(tmp_path))
    # The node the demo fails, and on a loaded machine now and then a node whose heartbeat came late (declared
    # failed, it passes its health check and comes back): at least one, at most a few.
    failures = int(summary.split("node failures ")[1].split(",")[0])
    assert 1 <= failures <= 3, (summary, tails(tmp_path))
    requeued = int(summary.split("requeued ")[1].split(",")[0])
    assert requeued >= 1, (summary, tails(tmp_path))
    assert "dashboard http://127.0.0.1:" in out
    # The demo's projector folded the run into its read model: the placed jobs are there.
    store = ReadModelStore(next(tmp_path.glob("*/readmodel")))
    assert store.offset("cell-a") > 0
    placed_in_store = sum(n for state, n in store.summary("cell-a")["jobs"].items() if state != "queued")
    assert placed_in_store >= placed * 0.9, (placed_in_store, summary)
