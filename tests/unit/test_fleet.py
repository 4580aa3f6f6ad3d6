"""The simulated fleet without a broker: topology, timers, the seeded failure schedule, and the
agents driving the four deciders on an in-memory log through a job's whole life."""

from __future__ import annotations

from events import models as m
from events.models import Reason
from events.submission import job_submitted
from projections.jobs import JobState
from replay.runner import VirtualCell
from services.agent.failures import FIRST_BUSY, FailureSpec, failure_schedule
from services.agent.fleet import Fleet, FleetSpec, Timers
from services.agent.simulated import AgentTiming

CELL = "cell-a"
TIMING = AgentTiming(start_delay_ms=1_000, checkpoint_every_ms=30_000, checkpoint_delay_ms=20_000,
                     heartbeat_every_ms=5_000)


def env(at: int, what: str, producer: str = "test") -> m.Envelope:
    return m.Envelope(event_id=f"{producer}-{what}", cell=CELL, at=at, producer=producer)


def tenancy(*priorities: m.PriorityClassDefined) -> list[m.Event]:
    return [m.TeamDefined(envelope=env(0, "team"), team="t"),
            m.QuotaSet(envelope=env(0, "quota"), team="t", gpu_type="H100", nominal=64), *priorities]


def submit(job_id: str, at: int, gpus: int = 8, duration_s: int = 120, **fields) -> m.JobSubmitted:
    return job_submitted(job_id, "t", max(1, gpus // 8), min(gpus, 8), "H100", cell=CELL, at=at, producer="launcher",
                         labels={"duration_ms": str(duration_s * 1000)}, **fields)


def play(fleet: Fleet, inputs: list[m.Event], until_ms: int, step_ms: int = 500) -> VirtualCell:
    """The four deciders on an in-memory log with a 2 s clock; the fleet reads every event and its
    timers fire every `step_ms`, its reports appended to the log as the Kafka loop would write them."""
    cell = VirtualCell(cell=CELL, tick_ms=2_000)
    cell.observers.append(lambda c, event, offset: fleet.observe(CELL, event, offset))
    fleet.register(0)
    cell.schedule_all(inputs)
    for now in range(0, until_ms + 1, step_ms):
        fleet.fire(now)
        for events in fleet.drain().values():
            for event, _ in events:
                cell.append(event)
        cell.run_until(now)
    return cell


def of(cell: VirtualCell, kind: type, job: str | None = None) -> list:
    return [e for e in cell.log if isinstance(e, kind) and (job is None or getattr(e, "job_id", None) == job)]


def test_layout_names_blocks_racks_and_nodes():
    layout = FleetSpec(nodes=5, nodes_per_rack=2, racks_per_block=2).layout("cell-a")
    assert [name for name, _ in layout] == ["cell-a-b0-r0-n0", "cell-a-b0-r0-n1", "cell-a-b0-r1-n2",
                                            "cell-a-b0-r1-n3", "cell-a-b1-r2-n4"]
    assert layout[4][1] == {"block": "b1", "rack": "r2"}
    assert {labels["block"] for _, labels in FleetSpec(nodes=9, nodes_per_rack=2).layout("c")} == {"b0"}


def test_timers_fire_in_time_order_with_their_due_time_and_chain():
    timers, fired = Timers(), []
    timers.at(30, lambda due: fired.append(("b", due)))
    timers.at(10, lambda due: (fired.append(("a", due)), timers.at(due + 5, lambda d: fired.append(("a2", d)))))
    timers.at(30, lambda due: fired.append(("c", due)))
    timers.at(99, lambda due: fired.append(("late", due)))
    assert timers.fire(40) == 4
    assert fired == [("a", 10), ("a2", 15), ("b", 30), ("c", 30)]
    assert timers.next_due() == 99 and len(timers) == 1


def test_failure_schedule_is_a_function_of_the_seed():
    nodes = [f"n{i}" for i in range(100)]
    spec = FailureSpec(node_rate=0.01, xid_rate=0.03, seed=7)

    def first(n: int, s: FailureSpec) -> list:
        schedule = failure_schedule(nodes, 8, s, 1_000)
        return [next(schedule) for _ in range(n)]

    failures = first(400, spec)
    assert failures == first(400, spec)
    assert failures != first(400, FailureSpec(node_rate=0.01, xid_rate=0.03, seed=8))
    assert all(a.at < b.at for a, b in zip(failures, failures[1:])) and failures[0].at > 1_000
    # 100 nodes at 0.04 failures per node-hour: about 4 an hour, a quarter of them node losses.
    hours = (failures[-1].at - 1_000) / 3_600_000
    assert 3.0 < len(failures) / hours < 5.0
    losses = sum(f.xid is None for f in failures)
    assert 0.15 < losses / len(failures) < 0.35
    assert {f.xid for f in failures} == {None, 79, 48, 13} and all(0 <= f.gpu < 8 for f in failures)
    assert list(failure_schedule(nodes, 8, FailureSpec(seed=7), 0)) == []


def test_registration_and_heartbeats_of_live_nodes():
    fleet = Fleet([CELL], FleetSpec(nodes=3, nodes_per_rack=2), TIMING)
    fleet.register(1_000)
    fleet.fire(11_000)
    events = fleet.drain()[CELL]
    configured, *registered = [e for e, hb in events if not hb][:4]
    assert configured.topology_levels == ["block", "rack"]
    assert [(r.node, r.labels["rack"], r.gpus) for r in registered] == [
        ("cell-a-b0-r0-n0", "r0", 8), ("cell-a-b0-r0-n1", "r0", 8), ("cell-a-b0-r1-n2", "r1", 8)]
    beats = [e for e, hb in events if hb]
    assert all(isinstance(b, m.NodeHeartbeat) for b in beats)
    assert [b.envelope.at for b in beats] == [11_000] * 3, "a late round is stamped with the present, once"
    fleet.fire(16_000)
    assert [e.envelope.at for e, _ in fleet.drain()[CELL]] == [16_000] * 3


def test_jobs_run_checkpoint_and_succeed():
    fleet = Fleet([CELL], FleetSpec(nodes=2, nodes_per_rack=2), TIMING)
    cell = play(fleet, [*tenancy(), submit("a", 3_000, gpus=16, duration_s=100), submit("b", 150_000, gpus=4)],
                until_ms=300_000)
    placed = of(cell, m.JobPlaced, "a")[0]
    started = of(cell, m.WorkerStarted, "a")
    assert [(w.worker, w.envelope.at) for w in started] == [(0, placed.at + 1_000), (1, placed.at + 1_000)]
    begun = started[0].envelope.at
    assert [(c.envelope.at - begun, c.progress_ms) for c in of(cell, m.CheckpointCompleted, "a")] == [
        (30_000, 30_000), (60_000, 60_000), (90_000, 90_000)]
    exits = of(cell, m.WorkerExited, "a")
    assert [(e.worker, e.exit_code, e.envelope.at - begun) for e in exits] == [(0, 0, 100_000), (1, 0, 100_000)]
    assert cell.job("a").state is JobState.SUCCEEDED
    assert cell.job("b").state is JobState.SUCCEEDED
    assert of(cell, m.NodeFailed) == [], "steady heartbeats: recovery sees every node alive"


def test_a_lost_node_is_failed_by_recovery_and_its_job_resumes_elsewhere():
    failures = FailureSpec(repair_ms=200_000, fail_node="cell-a-b0-r0-n0", fail_at_ms=45_000)
    fleet = Fleet([CELL], FleetSpec(nodes=2, nodes_per_rack=2), TIMING, failures)
    cell = play(fleet, [*tenancy(), submit("a", 3_000, duration_s=100), submit("b", 3_000, duration_s=100)],
                until_ms=400_000)
    on_n0 = next(p.job_id for p in of(cell, m.JobPlaced) if p.assignments[0].node == "cell-a-b0-r0-n0")
    other = "b" if on_n0 == "a" else "a"
    failed = of(cell, m.NodeFailed)
    assert [(f.node, f.envelope.reason) for f in failed] == [("cell-a-b0-r0-n0", Reason.HEARTBEAT_MISSED)]
    started_first = of(cell, m.WorkerStarted, on_n0)[0].envelope.at
    assert failed[0].last_heartbeat_at <= started_first + 45_000
    interrupted, = of(cell, m.JobInterrupted, on_n0)
    requeued, = of(cell, m.JobRequeued, on_n0)
    assert requeued.resume_checkpoint_id == f"{on_n0}/a1/{started_first + 30_000}"
    second = [p for p in of(cell, m.JobPlaced, on_n0) if p.attempt == 2]
    assert second and second[0].assignments[0].node == "cell-a-b0-r0-n1", "re-placed on the healthy node"
    restarted = [w for w in of(cell, m.WorkerStarted, on_n0) if w.attempt == 2][0].envelope.at
    final_exit, = [e for e in of(cell, m.WorkerExited, on_n0) if e.attempt == 2]
    assert final_exit.envelope.at - restarted == 70_000, "resumed from the 30 s checkpoint: 70 s left"
    assert [e.attempt for e in of(cell, m.WorkerExited, on_n0)] == [2], "the lost attempt reports nothing"
    assert cell.job(on_n0).state is JobState.SUCCEEDED and cell.job(other).state is JobState.SUCCEEDED
    assert [r.node for r in of(cell, m.NodeRecovered)] == ["cell-a-b0-r0-n0"], "repaired, checks pass, back"


def test_first_busy_loses_whichever_node_a_worker_starts_on_first():
    # two racks of one node: which one the job lands on is placement's choice, not the test's
    failures = FailureSpec(repair_ms=200_000, fail_node=FIRST_BUSY, fail_at_ms=45_000)
    fleet = Fleet([CELL], FleetSpec(nodes=2, nodes_per_rack=1), TIMING, failures)
    cell = play(fleet, [*tenancy(), submit("a", 3_000, duration_s=100)], until_ms=400_000)
    first = of(cell, m.JobPlaced, "a")[0].assignments[0].node
    assert [(f.node, f.envelope.reason) for f in of(cell, m.NodeFailed)] == [(first, Reason.HEARTBEAT_MISSED)]


def test_preemption_request_gets_a_checkpoint_before_the_deadline():
    classes = [m.PriorityClassDefined(envelope=env(0, "low"), name="low", value=0),
               m.PriorityClassDefined(envelope=env(0, "high"), name="high", value=100)]
    fleet = Fleet([CELL], FleetSpec(nodes=1), TIMING)
    cell = play(fleet, [*tenancy(*classes), submit("low", 0, duration_s=3_600, priority_class="low"),
                        submit("high", 700_000, duration_s=60, priority_class="high")], until_ms=900_000, step_ms=1_000)
    request, = of(cell, m.PreemptionRequested, "low")
    checkpoint = [c for c in of(cell, m.CheckpointCompleted, "low") if c.envelope.at == request.at + 20_000]
    assert checkpoint, "asked to checkpoint: done after the checkpoint delay"
    preempted, = of(cell, m.JobPreempted, "low")
    assert preempted.checkpoint_id == checkpoint[0].checkpoint_id
    assert cell.job("high").state is JobState.SUCCEEDED
    resumed = [c.progress_ms for c in of(cell, m.CheckpointCompleted, "low") if c.attempt == 2]
    assert resumed[0] == checkpoint[0].progress_ms + 30_000, "the victim resumes from its checkpoint"


def test_a_restarted_fleet_folds_history_silently_and_carries_on_running_jobs():
    fleet = Fleet([CELL], FleetSpec(nodes=1), TIMING)
    cell = play(fleet, [*tenancy(), submit("a", 0, duration_s=100)], until_ms=50_000)
    assert cell.state.jobs["a"].state is JobState.RUNNING
    again = Fleet([CELL], FleetSpec(nodes=1), TIMING)
    for offset, event in enumerate(cell.log):
        again.observe(CELL, event, offset, live=False)
    again.adopt(60_000)
    again.register(60_000)
    again.fire(150_000)
    reports = [e for e, hb in again.drain()[CELL] if not hb]
    assert not any(isinstance(e, (m.NodeRegistered, m.CellConfigured, m.WorkerStarted)) for e in reports)
    exits = [e for e in reports if isinstance(e, m.WorkerExited)]
    checkpoint = cell.state.jobs["a"].checkpoint.progress_ms  # 30 s: the restarted workers resume from it
    assert [(e.job_id, e.envelope.at) for e in exits] == [("a", 60_000 + 100_000 - checkpoint)]
