"""The weighted dominant share that orders teams under fair share (usage over the pool's nominal, per weight), the
admission cycle's memo of each pool's use, and the part of a nominal a team keeps in a pool overdrawn."""

from __future__ import annotations

from projections.cell import CellState
from projections.evolve import evolve
from projections.pooled import PooledUsage
from tests.builders import quota, team


def tenancy_of(*events):
    state = CellState()
    for offset, event in enumerate(events):
        assert evolve(state, event, offset) is None
    return state, len(events)


def test_a_team_keeps_its_unlent_part_as_far_as_an_overdrawn_pool_allows():
    """Kueue's lendingLimit: what a team does not lend stays its own. A lending limit lowered under a borrower leaves
    the pool overdrawn; the lender may still use its unused kept part less the overdraft (Kueue: the unused
    guaranteed quota plus the cohort's headroom, which may be negative), and beyond that must reclaim."""
    state, offset = tenancy_of(team("nlp", cohort="all"), team("cv", cohort="all"), quota("nlp", 16), quota("cv", 32))
    tenancy = state.tenancy
    tenancy.use(("nlp", "H100"), 32)  # 16 of it borrowed from cv, which lent all it had
    assert evolve(state, quota("cv", 32, lending_limit=0), offset) is None  # the pool: nlp's 16, used 32
    assert tenancy.admissible("cv", "H100", 16).fits  # 32 kept, unused, less the overdraft of 16
    refused = tenancy.admissible("cv", "H100", 17)
    assert not refused.fits and refused.limit == "reclaim" and refused.borrowed == 0
    tenancy.use(("nlp", "H100"), -8)  # a borrower ended: the overdraft is 8
    assert tenancy.admissible("cv", "H100", 24).fits
    assert not tenancy.admissible("cv", "H100", 25).fits
    assert not tenancy.admissible("nlp", "H100", 1).fits  # nlp borrows more only from what the pool has left


def test_share_is_usage_over_the_pools_nominal_per_weight():
    state, _ = tenancy_of(team("nlp", cohort="all", weight=2.0), team("cv", cohort="all"),
                          quota("nlp", 60), quota("cv", 40), quota("nlp", 10, gpu_type="A100"))
    tenancy = state.tenancy
    tenancy.use(("nlp", "H100"), 50)
    tenancy.use(("nlp", "A100"), 8)
    # H100: 50 of the pool's 100, weight 2 -> 250 thousandths; A100: 8 of 10, weight 2 -> 400: the larger counts
    assert tenancy.dominant_share_milli("nlp") == 400
    assert tenancy.dominant_share_milli("cv") == 0
    assert tenancy.dominant_share_milli("nlp", {("nlp", "H100"): 100}) == 500


def test_share_follows_a_quota_change_of_another_member():
    state, offset = tenancy_of(team("nlp", cohort="all"), team("cv", cohort="all"), quota("nlp", 50), quota("cv", 50))
    tenancy = state.tenancy
    tenancy.use(("nlp", "H100"), 50)
    assert tenancy.dominant_share_milli("nlp") == 500
    assert evolve(state, quota("cv", 150), offset) is None  # the pool now has 200
    assert tenancy.dominant_share_milli("nlp") == 250
    assert evolve(state, team("ops", cohort="all"), offset + 1) is None
    assert evolve(state, quota("ops", 50), offset + 2) is None  # and a new member: 250
    assert tenancy.dominant_share_milli("nlp") == 200


def test_a_pooled_usage_answers_as_a_plain_one_after_every_kind_of_change():
    """PooledUsage keeps each pool's use until an entry changes: every way of changing one starts it again."""
    state, _ = tenancy_of(team("nlp", cohort="all"), team("cv", cohort="all"), team("solo", cohort=None),
                          quota("nlp", 8, lending_limit=4), quota("cv", 8), quota("solo", 4))
    tenancy = state.tenancy
    usage = PooledUsage({("nlp", "H100"): 6, ("cv", "H100"): 8})
    changes = [
        lambda u: u.__setitem__(("cv", "H100"), 10),
        lambda u: u.update({("nlp", "H100"): 12}),
        lambda u: u.pop(("cv", "H100")),
        lambda u: u.setdefault(("cv", "H100"), 3),
        lambda u: u.__delitem__(("nlp", "H100")),
        lambda u: u.__ior__({("nlp", "H100"): 2, ("solo", "H100"): 4}),
        lambda u: u.popitem(),
        lambda u: u.clear(),
    ]
    for change in [lambda u: None, *changes]:
        change(usage)
        plain = dict(usage)
        for who in ("nlp", "cv", "solo"):
            assert tenancy.pool_used(who, "H100", usage) == tenancy.pool_used(who, "H100", plain)
            for gpus in (1, 4, 9):
                assert tenancy.admissible(who, "H100", gpus, True, usage) == \
                    tenancy.admissible(who, "H100", gpus, True, plain)
    assert usage.pools  # what the last answers remembered
