"""A short chaos run in the suite (the long ones are `python tests/benchmarks/bench_chaos.py`): every service
killed with -9 at least once under a fleet and a trace load, and the whole log checked after."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.chaos import Chaos, run
from tests.integration.control_plane import SERVICES

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def test_kill_9_of_every_service_under_load_keeps_every_check(kafka_bootstrap, gangway_topics, tmp_path: Path):
    report = run(None, kafka_bootstrap, gangway_topics, tmp_path,
                 Chaos(seconds=40, speedup=10, nodes=12, jobs=150, kill_every=(4.0, 8.0), seed=7, settle_s=15))
    assert set(report.kills) == set(SERVICES)
    assert report.problems == []
    assert report.succeeded > 100, report
