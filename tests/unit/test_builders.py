"""The test builders speak the domain: a submitted gang is admitted and placed whole."""

from projections.jobs import JobState
from tests.builders import fold, job, node, quota, team, topology


def test_a_gang_that_fits_is_admitted_and_placed_whole():
    cell = fold(topology("rack"), node("n0", rack="r0"), node("n1", rack="r0"), team("nlp"), quota("nlp", 16),
                job("llm", workers=2, gpus=8, team="nlp", at=1_000))
    llm = cell.state.jobs["llm"]
    assert llm.state is JobState.PLACED
    assert llm.nodes() == ["n0", "n1"]
    assert cell.state.tenancy.used("nlp", "H100") == 16
