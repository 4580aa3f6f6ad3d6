"""Each policy's defining behaviour, on small hand-made traces whose outcome is known in advance.

No failures, no start-up, checkpoint or restart costs (conftest.QUIET); the clock ticks every
60 s; nodes have 8 GPUs, racks 16 nodes unless a test says otherwise.
"""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from services.policies import CATALOGUE, EARLIER, UnknownPolicy, policy, resolve
from services.policy import Policy
from tests.sim.conftest import H, queue_s, run, write_trace


def test_catalogue_holds_five_versioned_policies():
    assert list(CATALOGUE) == ["gangway", "fifo", "static", "kueue-like", "backfill", "tiresias"]
    versions = [p.version for p in CATALOGUE.values()]
    assert all(isinstance(p, Policy) for p in CATALOGUE.values())
    assert len(set(versions)) == 6 and all(v.startswith(name) for name, v in zip(CATALOGUE, versions))
    with pytest.raises(KeyError, match="known: gangway"):
        policy("slurm")


def lender_borrower(traces):
    """Two teams with one node of nominal quota each: `alpha` has two whole-node jobs at once, `beta` is idle
    until 10 h."""
    write_trace(traces, "alpha", [(0, H, 8), (0, H, 8)])
    write_trace(traces, "beta", [(10 * H, 600, 8)])


def test_lending_cuts_the_waiting_team_to_zero(traces):
    lender_borrower(traces)
    shared = queue_s(traces, "gangway", 16)
    static = queue_s(traces, "static", 16)
    assert shared["alpha-00001"] == 0  # borrows beta's idle node
    assert static["alpha-00001"] == H  # confined to its own node
    assert shared["beta-00000"] == static["beta-00000"] == 0  # the lent node came back long before beta needed it


def test_static_never_lends_and_leaves_the_idle_node_idle(traces):
    lender_borrower(traces)
    result, _ = run(traces, "static", 16)
    metrics = result["metrics"]
    assert metrics["per_team"]["alpha"]["avg_queue_s"] == H / 2
    assert metrics["idle_while_waiting"] == 0.5  # beta's node idles the whole hour alpha waits
    gangway, _ = run(traces, "gangway", 16)
    assert gangway["metrics"]["idle_while_waiting"] == 0.0
    assert gangway["metrics"]["per_team"]["alpha"]["avg_queue_s"] == 0


def head_of_line(traces):
    """Three 6-GPU jobs leave 2 GPUs free on each of three nodes; a 16-GPU gang (two whole nodes) then
    blocks, and a 2-GPU job arrives behind it."""
    write_trace(traces, "solo", [(0, 2 * H, 6), (0, 2 * H, 6), (0, 2 * H, 6), (60, H, 16), (120, H, 2)])


def test_fifo_head_blocks_the_small_job_behind_it(traces):
    head_of_line(traces)
    waits = queue_s(traces, "fifo", 24)
    assert waits["solo-00003"] == 2 * H - 60  # the gang starts when the three jobs end
    assert waits["solo-00004"] == 2 * H - 120  # and only then the small job behind it


@pytest.mark.parametrize("name", ["backfill", "gangway", "kueue-like"])
def test_backfill_lets_the_small_job_pass_the_blocked_head(traces, name):
    head_of_line(traces)
    waits = queue_s(traces, name, 24)
    assert waits["solo-00004"] == 0  # 2 free GPUs on a node the gang's reservation does not hold
    assert waits["solo-00003"] == 2 * H - 60  # the gang is not delayed by it


def stream_of_small_jobs(traces, nodes: int = 2) -> str:
    """Whole-node jobs of 1 h, `nodes` / 2 every 30 min (and as many of 30 min at the start), keep a cell of `nodes`
    nodes busy for 10 h; a 2-node gang arrives at 10 min. Returns the gang's job id."""
    small = [(k * 1800, H, 8) for k in range(21) for _ in range(nodes // 2)]
    small += [(0, H // 2, 8)] * (nodes // 2 - 1)
    write_trace(traces, "solo", [*small, (600, H, 16)])
    return f"solo-{len(small):05d}"


def test_easy_backfill_reserves_for_the_head_at_once(traces):
    stream_of_small_jobs(traces)
    waits = queue_s(traces, "backfill", 16)
    assert waits["solo-00021"] == H - 600  # both nodes drain for it: it starts when the first job ends


def test_kueue_like_without_reservations_starves_the_gang(traces):
    stream_of_small_jobs(traces)
    waits = queue_s(traces, "kueue-like", 16)
    assert waits["solo-00021"] > 10 * H  # small jobs take every node that frees until the stream stops


def test_gangway_reservation_ages_in(traces):
    gang = stream_of_small_jobs(traces, nodes=4)  # the gang needs half the cell: it may drain it
    waits = queue_s(traces, "gangway", 32)
    assert waits[gang] == H // 2 - 600  # reserved after 5 min of waiting, before the first nodes free at 30 min


def test_gangway_drains_nothing_for_a_gang_bigger_than_half_the_cell(traces):
    stream_of_small_jobs(traces)  # the gang needs the whole cell (admission.max_drain_share is 0.5)
    assert queue_s(traces, "gangway", 16)["solo-00021"] > 10 * H  # it waits for the stream to stop, as under Kueue
    assert queue_s(traces, "gangway-1", 16)["solo-00021"] == H - 600  # the version before the share drained it


def test_kueue_like_admits_one_gang_per_queue_per_cycle(traces):
    write_trace(traces, "solo", [(0, H + 30, 8), (10, H, 1), (20, H, 1), (30, H, 1), (40, H, 1)])
    kueue = queue_s(traces, "kueue-like", 8)
    gangway = queue_s(traces, "gangway", 8)
    freed = H + 30  # the 8-GPU job ends; ticks come every 60 s
    assert [kueue[f"solo-0000{i}"] for i in range(1, 5)] == [freed - 10, freed + 30 - 20, freed + 90 - 30,
                                                             freed + 150 - 40]
    assert [gangway[f"solo-0000{i}"] for i in range(1, 5)] == [freed - 10, freed - 20, freed - 30, freed - 40]


def test_topology_awareness_keeps_a_gang_in_one_rack(traces):
    # 4 nodes in racks of 2; a 1-GPU job sits on n0, then a 2-node gang arrives
    write_trace(traces, "solo", [(0, 2 * H, 1), (60, H, 16)])
    gangway, _ = run(traces, "gangway", 32, nodes_per_rack=2)
    kueue, _ = run(traces, "kueue-like", 32, nodes_per_rack=2)
    assert gangway["metrics"]["multi_node_gangs"] == kueue["metrics"]["multi_node_gangs"] == 1
    assert gangway["metrics"]["multi_node_gangs_in_one_rack"] == 1.0  # rack r1, both nodes free
    assert kueue["metrics"]["multi_node_gangs_in_one_rack"] == 0.0  # first fit: n1 (rack r0) and n2 (rack r1)


def test_packing_racks_keeps_free_nodes_together_for_a_later_gang(traces):
    # 4 nodes in racks of 2 (n0 n1 | n2 n3). Two 1 h jobs on n0 and n1, a 10 h job on n2; at 1 h n0, n1 and n3
    # are free when a whole-node job arrives, then a 2-node gang
    write_trace(traces, "solo", [(0, H, 8), (0, H, 8), (0, 10 * H, 8), (H + 60, 5 * H, 8), (H + 120, H, 16)])
    by_name, _ = run(traces, "gangway-3", 32, nodes_per_rack=2)
    packed, _ = run(traces, "gangway-3+placement.pack_domains=true", 32, nodes_per_rack=2)
    assert by_name["metrics"]["multi_node_gangs_in_one_rack"] == 0.0  # the job took n0: n1 and n3 are left
    assert packed["metrics"]["multi_node_gangs_in_one_rack"] == 1.0  # it took n3, the fuller rack's: n0 n1 left
    # whole-node jobs only: no node is ever partly used, so no GPU is stranded
    assert by_name["metrics"]["stranded_gpus"] == packed["metrics"]["stranded_gpus"] == 0.0


def test_stranded_gpus_are_the_free_gpus_of_partly_used_nodes(traces):
    write_trace(traces, "solo", [(0, H, 2)])  # one node of two: 6 of its GPUs free for the hour, the other's 8 not
    result, _ = run(traces, "gangway", 16)
    assert result["metrics"]["stranded_gpus"] == 6 / 16


def reclaim(traces):
    """`borrower` runs two whole-node 10 h jobs, one on `lender`'s idle node; `lender` wants it back at 3,010 s
    (between two ticks)."""
    write_trace(traces, "borrower", [(0, 10 * H, 8), (0, 10 * H, 8)])
    write_trace(traces, "lender", [(3010, H, 8)])


def test_gangway_reclaims_lent_quota_after_a_checkpoint(traces):
    reclaim(traces)
    result, outcome = run(traces, "gangway", 16)
    waits = {job: waited for job, (_, waited, _) in outcome.per_job.items()}
    assert waits["lender-00000"] == 30  # the victim writes a checkpoint (30 s), then gives the node back
    assert result["metrics"]["preemptions"] == 1
    assert result["metrics"]["gpu_hours_lost"] == 0  # it resumes from that checkpoint


def test_kueue_like_reclaims_without_checkpoint_awareness(traces):
    reclaim(traces)
    result, outcome = run(traces, "kueue-like", 16)
    waits = {job: waited for job, (_, waited, _) in outcome.per_job.items()}
    assert waits["lender-00000"] == 0  # the victim is evicted at once, with no checkpoint grace
    assert result["metrics"]["preemptions"] == 1
    # it resumes from its last periodic checkpoint (1,800 s): 1,210 s x 8 GPUs are lost
    assert result["metrics"]["gpu_hours_lost"] == 2.7


def test_fifo_never_preempts_so_the_lender_waits(traces):
    reclaim(traces)
    waits = queue_s(traces, "fifo", 16)
    assert waits["lender-00000"] == 10 * H - 3010


def test_static_keeps_the_lenders_node_free(traces):
    reclaim(traces)
    waits = queue_s(traces, "static", 16)
    assert waits["lender-00000"] == 0
    assert waits["borrower-00001"] == 10 * H  # it may not borrow: it runs after the first one


def test_tiresias_lets_a_newcomer_preempt_the_job_that_has_received_the_most(traces):
    # an 8-GPU cell: a 10 h job runs; a 30 min job arrives after 2 h (16 GPU-hours received: band 2 against 0)
    write_trace(traces, "solo", [(0, 10 * H, 8), (2 * H, H // 2, 8)])
    kueue = queue_s(traces, "kueue-like", 8)
    tiresias = queue_s(traces, "tiresias", 8)
    assert kueue["solo-00001"] == 8 * H  # FIFO: it waits for the long job to end
    assert tiresias["solo-00001"] <= 10 * 60  # the long job checkpoints and yields within its grace
    assert tiresias["solo-00000"] >= H // 2  # and waits while the short one runs


TIME_SHARING = 'gangway-2+admission.least_attained_service=true+preemption.time_share="WithinTeam"'


def finished_then_long_and_short(traces, spread: bool):
    """60 whole-cell jobs one after another, every 6 h: all 1 h long, or (`spread`) 6 min with every tenth 5 h
    (their GPU-time's coefficient of variation about 2.5). Then a 10 h job, and 2 h later a 30 min job."""
    first = [(i * 6 * H, (5 * H if i % 10 == 9 else H // 10) if spread else H, 8) for i in range(60)]
    write_trace(traces, "solo", [*first, (361 * H, 10 * H, 8), (363 * H, H // 2, 8)])


@pytest.mark.parametrize("spread", [True, False], ids=["spread", "alike"])
def test_time_sharing_waits_for_finished_jobs_to_show_it_pays(traces, spread):
    finished_then_long_and_short(traces, spread)
    gated = queue_s(traces, TIME_SHARING + "+admission.least_attained_service_min_cv=1.0", 8)
    always = queue_s(traces, TIME_SHARING, 8)
    assert always["solo-00061"] <= 10 * 60  # time-sharing: the long job checkpoints and yields
    if spread:  # service times vary more than an exponential's: least attained service pays
        assert gated["solo-00061"] <= 10 * 60
    else:  # alike: first come, first served; sharing would only add a restart
        assert gated["solo-00061"] == 8 * H
        assert gated["solo-00060"] == 0


def test_gangway_consolidates_and_packs_racks_and_earlier_versions_still_resolve_without():
    gangway = policy("gangway")
    assert gangway.version == "gangway-11" and gangway.admission.earliest_deadline_first
    assert gangway.admission.release_holds_out_of_service and gangway.admission.replan_unfit_reservations
    assert gangway.admission.priority_passes_reservations and gangway.preemption.single_victims_always
    assert not gangway.recovery.hold_victims_through_backoff
    assert gangway.placement.pack_domains and gangway.preemption.prefer_one_rack
    assert gangway.preemption.consolidate and gangway.admission.movers_in_plan_order
    assert gangway.admission.quiet_cycles_reserve
    assert gangway.admission.replan_reservations and not gangway.admission.quota_held_reserves_free_nodes
    assert gangway.admission.big_gangs_reserve_after_ms == 7 * 24 * 3_600_000
    ten = resolve("gangway-10")
    assert ten.admission == replace(gangway.admission, release_holds_out_of_service=False,
                                    replan_unfit_reservations=False, priority_passes_reservations=False)
    assert ten.preemption == replace(gangway.preemption, single_victims_always=False)
    assert ten.recovery == replace(gangway.recovery, hold_victims_through_backoff=True)
    assert ten.placement == gangway.placement
    nine = resolve("gangway-9")
    assert nine.admission == replace(ten.admission, earliest_deadline_first=False)
    assert (nine.placement, nine.preemption, nine.recovery) == (ten.placement, ten.preemption, ten.recovery)
    eight = resolve("gangway-8")
    assert not eight.admission.replan_reservations and eight.admission.quota_held_reserves_free_nodes
    assert eight.admission == replace(nine.admission, replan_reservations=False, quota_held_reserves_free_nodes=True,
                                      big_gangs_reserve_after_ms=None)
    assert (eight.placement, eight.preemption, eight.recovery) == (ten.placement, ten.preemption, ten.recovery)
    seven = resolve("gangway-7")
    assert not seven.admission.quiet_cycles_reserve and seven.admission.movers_in_plan_order
    assert seven.admission == replace(eight.admission, quiet_cycles_reserve=False)
    assert (seven.placement, seven.preemption, seven.recovery) == (ten.placement, ten.preemption, ten.recovery)
    six = resolve("gangway-6")
    assert not six.admission.movers_in_plan_order and not six.admission.quiet_cycles_reserve
    assert six.preemption == ten.preemption
    assert six.placement == ten.placement and six.recovery == ten.recovery
    four = resolve("gangway-4")
    assert not four.preemption.consolidate and four.placement.pack_domains and four.preemption.prefer_one_rack
    assert four.admission == six.admission and four.recovery == ten.recovery
    earlier = resolve("gangway-3")
    assert not earlier.placement.pack_domains and not earlier.preemption.prefer_one_rack
    assert earlier.recovery == ten.recovery and earlier.admission == six.admission


def test_earlier_versions_resolve_to_the_knobs_their_logs_were_decided_under():
    """Every earlier version, field for field, as frozen when it was the default or after (earlier_policies.json):
    a log recorded under one verifies only while it resolves the same. A new default adds its predecessor there."""
    frozen = json.loads((Path(__file__).parent / "earlier_policies.json").read_text())
    assert sorted(EARLIER) == sorted(frozen)
    for name, knobs in frozen.items():
        assert asdict(resolve(name)) == knobs, name


def test_a_catalogue_name_takes_knobs_as_its_version_does_and_resolves_back():
    named = resolve("gangway+admission.backfill=false")
    assert named == resolve("gangway-11+admission.backfill=false")
    assert named.version == "gangway-11+admission.backfill=false" and resolve(named.version) == named
    assert resolve('kueue-like+preemption.min_runtime="5m"').preemption.min_runtime_ms == 300_000
    with pytest.raises(UnknownPolicy, match="unknown knob policy.admission.foo"):
        resolve("gangway+admission.foo=1")
    with pytest.raises(UnknownPolicy, match="unknown policy 'gangwa"):
        resolve("gangwa+admission.backfill=false")
