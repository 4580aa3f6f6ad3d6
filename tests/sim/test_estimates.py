"""The simulator scores the queue's estimated starts against the real ones (replay/sim/estimates.py)."""

from __future__ import annotations

import json

from replay import cli
from tests.sim.conftest import H, write_trace


def test_estimates_are_recorded_as_positions_change_and_scored(traces, tmp_path, capsys):
    # 8 GPUs; a 2 h job holds them, four 1 h jobs queue behind it in order: each waits for the ones ahead.
    write_trace(traces, "nlp", [(0, 2 * H, 8), *[(60 + i, H, 8) for i in range(4)]])
    out = tmp_path / "r.json"
    assert cli.main(["sim", "--trace", str(traces), "--gpus", "8", "--no-progress", "--no-private", "--estimates",
                     "--failures-per-1000-gpu-days", "0", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    e = result["estimates"]
    assert e["policy"] == result["policy"]["version"] and e["never_started"] == 0
    # Each of the four was estimated at submission and again each time the job ahead of it started.
    assert e["at_submission"]["estimates"] == 4 and e["all"]["estimates"] == 4 + 3 + 2 + 1
    for tally in (e["all"], e["at_submission"], e["at_submission_waited"]):
        shares = [tally[k] for k in ("inside_share", "early_share", "late_share", "unknown_share")]
        assert all(0 <= s <= 1 for s in shares) and abs(sum(shares) - 1) < 1e-3
        assert abs(sum(tally["unknown_by_basis"].values()) - tally["unknown_share"]) < 1e-3
    assert "estimated starts" in capsys.readouterr().err


def test_without_the_flag_the_result_has_no_estimates(traces, tmp_path):
    write_trace(traces, "nlp", [(0, H, 8)])
    out = tmp_path / "r.json"
    assert cli.main(["sim", "--trace", str(traces), "--gpus", "8", "--no-progress", "--no-private", "--json",
                     str(out)]) == 0
    assert "estimates" not in json.loads(out.read_text())
