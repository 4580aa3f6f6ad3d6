"""The read-model projector on the real broker: following the log while it is written, it ends with exactly the
rows of a rebuild from offset 0, and it resumes after a restart where it stopped."""

from __future__ import annotations

import threading
import time

import pytest

from projections.readmodel.projector import Projector, rebuild
from projections.readmodel.store import ReadModelStore
from tests.integration.control_plane import Operator

pytestmark = [pytest.mark.kafka]


def test_a_following_projector_equals_a_rebuild_from_offset_0(kafka_bootstrap, gangway_topics, tmp_path):
    operator = Operator(kafka_bootstrap, gangway_topics)
    operator.cell(nodes=3)
    live_store = ReadModelStore(tmp_path / "live")
    live = Projector(live_store, ["cell-a"], kafka_bootstrap, topics=gangway_topics)
    stop = threading.Event()
    follower = threading.Thread(target=live.follow, args=(stop,))
    follower.start()
    try:
        for i in range(20):
            operator.submit(f"job-{i}", workers=1 + i % 2)
        end = operator.submit("last").envelope
        deadline = time.monotonic() + 30
        while live_store.job("cell-a", "last") is None and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        follower.join(30)
    assert live_store.job("cell-a", "last")["submitted_at"] == end.at
    rebuilt = ReadModelStore(tmp_path / "rebuilt")
    rebuild(rebuilt, ["cell-a"], kafka_bootstrap, topics=gangway_topics)
    assert live_store.rows() == rebuilt.rows()
    assert live.lag["cell-a"].offset == rebuilt.offset("cell-a")

    operator.submit("after-restart")  # a restarted projector resumes from its stored offset
    live_store.close()
    reopened = ReadModelStore(tmp_path / "live")
    resumed = Projector(reopened, ["cell-a"], kafka_bootstrap, topics=gangway_topics)
    assert resumed.folds["cell-a"].state.offset == rebuilt.offset("cell-a")
    resumed.catch_up()
    again = ReadModelStore(tmp_path / "rebuilt-again")
    rebuild(again, ["cell-a"], kafka_bootstrap, topics=gangway_topics)
    assert reopened.rows() == again.rows() and reopened.job("cell-a", "after-restart") is not None
