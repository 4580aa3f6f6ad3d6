"""The live cell view folds a log into per-team rows and the latest decisions."""

from pathlib import Path

from projections.watch import CellView
from replay.scenario.play import load, run

DEMO = Path(__file__).resolve().parents[1] / "scenarios" / "demo.yaml"


def test_the_view_shows_each_team_and_the_latest_decisions():
    view = CellView()
    for offset, event in enumerate(run(load(DEMO)).cell.log):
        view.fold(offset, event)
    screen = view.render()
    rows = {line.split()[0]: line.split()[1:] for line in screen.splitlines() if line.split()[:1] in (["nlp"], ["vision"])}
    assert rows["vision"][:3] == ["40", "24", "16"]  # in use, nominal, borrowed at the end of the demo
    assert rows["nlp"][-1] == "1"  # nlp-llm succeeded
    assert "PreemptionRequested 1" in screen and "JobSucceeded" in screen.split("latest:")[1]
