"""The README's main command, shortened: `gangway demo` runs every process on the real broker and
ends with a summary in which work was placed, a node failed and its jobs were requeued."""

import pytest

from replay.cli import main

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def test_the_demo_runs_end_to_end(kafka_bootstrap, tmp_path, capsys):
    code = main(["demo", "--duration", "45", "--node-failure-at", "8", "--bootstrap-servers", kafka_bootstrap,
                 "--state-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    summary = out.split("summary")[-1]
    placed = int(summary.split("placed ")[1].split(",")[0])
    assert placed > 50, summary
    assert "node failures 1" in summary, summary
    requeued = int(summary.split("requeued ")[1].split(",")[0])
    assert requeued >= 1, summary
