"""Random event streams over a small cell, as scenarios: the same builder serves hypothesis
(which shrinks a failing stream) and a seeded `random.Random` (for the determinism check)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from replay.scenario.play import parse
from replay.scenario.spec import Scenario

NODES = ["n0", "n1", "n2", "n3", "n4"]  # n2 and n4 are hot spares
TEAMS = ["a", "b", "c"]  # a and b share a cohort; c stands alone
XIDS = [13, 31, 48, 63, 79, 999]
MINUTE = 60_000


class Chooser(Protocol):
    def one(self, options: Sequence[Any]) -> Any: ...
    def int(self, low: int, high: int) -> int: ...


class RandomChooser:
    """Choices from a seeded `random.Random`."""

    def __init__(self, rng) -> None:
        self.rng = rng

    def one(self, options: Sequence[Any]) -> Any:
        return self.rng.choice(list(options))

    def int(self, low: int, high: int) -> int:
        return self.rng.randint(low, high)


class DataChooser:
    """Choices drawn from hypothesis's `st.data()`, so failures shrink."""

    def __init__(self, data) -> None:
        from hypothesis import strategies as st
        self.data, self.st = data, st

    def one(self, options: Sequence[Any]) -> Any:
        return self.data.draw(self.st.sampled_from(list(options)))

    def int(self, low: int, high: int) -> int:
        return self.data.draw(self.st.integers(low, high))


def _limit(c: Chooser) -> int | None:
    return c.one([None, None, 0, 4, 8])


def _action(c: Chooser, jobs: list[str]) -> dict:
    kind = c.one(["submit"] * 5 + ["cancel", "worker_exited", "worker_exited", "node_failed", "gpu_error",
                                    "gpu_error", "quota_change", "cordon", "uncordon", "health_check_passed",
                                    "checkpoint_completed", "heartbeat_silence"])
    if kind == "submit" or not jobs and kind in ("cancel", "worker_exited", "checkpoint_completed"):
        job = f"j{len(jobs)}"
        jobs.append(job)
        return {"submit": {
            "job": job, "team": c.one(TEAMS), "workers": c.int(1, 3), "gpus_per_worker": c.one([1, 2, 4]),
            "min_workers": c.one([None, None, 1, 2]), "time_limit": c.one([None, None, 5 * MINUTE, 40 * MINUTE]),
            "priority_class": c.one([None, "low", "high", "prod"]), "runs_for": c.int(1, 30) * MINUTE,
            "topology_required": c.one([None, None, "rack", "block"]), "max_restarts": c.int(0, 2)}}
    if kind in ("cancel", "checkpoint_completed"):
        return {kind: c.one(jobs)}
    if kind == "worker_exited":
        return {kind: {"job": c.one(jobs), "worker": c.int(0, 2), "code": c.one([0, 1])}}
    if kind == "gpu_error":
        return {kind: {"node": c.one(NODES), "gpu": c.int(0, 3), "xid": c.one(XIDS)}}
    if kind == "quota_change":
        return {kind: {"team": c.one(TEAMS), "nominal": c.one([0, 4, 8, 12]), "borrowing_limit": _limit(c),
                       "lending_limit": _limit(c)}}
    return {kind: c.one(NODES)}


#: Policy variants a stream runs under (overrides of the stream's base policy).
VARIANTS: list[dict] = [
    {},
    {"preemption": {"min_runtime": "0s", "checkpoint_aware": False}},
    {"admission": {"backfill": False, "fair_share": False}},
    {"admission": {"borrowing": False, "max_reservations": 1}, "placement": {"best_fit": False}},
    {"placement": {"topology_aware": False}, "recovery": {"use_hot_spares": False}},
    {"preemption": {"enabled": False}, "admission": {"admissions_per_team_per_cycle": 1}},
    {"preemption": {"checkpoint_grace": "0s", "min_runtime": "0s"}, "admission": {"protect_queue_heads": False}},
    {"preemption": {"consolidate": True, "min_runtime": "0s"}},
    {"admission": {"reserve_earliest_free": True, "replan_reservations": True, "quota_held_reserves_free_nodes": False}},
    {"admission": {"max_drain_share": 0.25, "big_gangs_reserve_on_known_drain": True, "big_gangs_reserve_after": "10m"}},
    {"admission": {"replan_reservations": False, "quota_held_reserves_free_nodes": True}},  # gangway-8's reservations
    {"admission": {"earliest_deadline_first": False}},  # gangway-9's order: submit order within a team
]


def _rules(c: Chooser) -> dict:
    """A team's preemption rules, each left to the policy or drawn from what Kueue allows."""
    rules = {"within_team": c.one([None, None, "Never", "LowerPriority", "LowerOrNewerEqualPriority"]),
             "reclaim_within_cohort": c.one([None, None, "Never", "LowerPriority", "Any"]),
             "borrow_within_cohort": c.one([None, None, "Never", "LowerPriority"]),
             "max_priority_threshold": c.one([None, None, 10, 50])}
    if rules["reclaim_within_cohort"] == "Never":
        rules["borrow_within_cohort"] = None
    return {k: v for k, v in rules.items() if v is not None}


def stream(c: Chooser, steps: int) -> Scenario:
    """A scenario: a 5-node cell of 4-GPU nodes, three teams, a policy variant and `steps` random inputs."""
    variant = c.one(range(len(VARIANTS)))
    policy = {"preemption": {"min_runtime": "2m", "checkpoint_grace": "1m"},
              "admission": {"reservation_after": "3m"}, "recovery": {"backoff_base": "20s"}}
    for section, knobs in VARIANTS[variant].items():
        policy[section] = {**policy.get(section, {}), **knobs}
    jobs: list[str] = []
    inputs = sorted(({"at": c.int(0, 30) * MINUTE + c.int(0, 59) * 1000, **_action(c, jobs)} for _ in range(steps)),
                    key=lambda i: i["at"])
    return parse({
        "name": "random-stream",
        "cell": {"topology": ["block", "rack"], "nodes": [{"generate": {
            "count": 5, "gpus": 4, "gpu_type": "H100", "nodes_per_rack": 3, "racks_per_block": 1,
            "spares_per_rack": 1}}]},
        "cohorts": [{"name": "co"}],
        "teams": [{"name": "a", "cohort": "co", "weight": 2, "quota": {"H100": {"nominal": 8, "borrowing_limit": 4}},
                   "preemption": _rules(c)},
                  {"name": "b", "cohort": "co", "quota": {"H100": {"nominal": 4, "lending_limit": 2}},
                   "preemption": _rules(c)},
                  {"name": "c", "quota": {"H100": 4}}],
        "priority_classes": [{"name": "low", "value": 10}, {"name": "high", "value": 100},
                             {"name": "prod", "value": 50, "preemptible": False}],
        "policy": policy,
        "agents": {"checkpoint_every": c.one(["5m", None]), "checkpoint_delay": c.one(["20s", "2m"]),
                   "heartbeat_every": "10s"},
        "tick": "30s", "until": "40m", "inputs": inputs,
    }, "random stream")


def time_shared(c: Chooser) -> Scenario:
    """A scenario for least attained service (Tiresias' order) with time-sharing: two 8-GPU nodes, two teams, 2-4
    long gangs early, then 6-14 short ones over 90 minutes, so gangs move between bands (the second begins at one
    GPU-hour), yield, and wait behind newer work."""
    inputs = []
    for i in range(c.int(2, 4)):
        inputs.append({"at": c.int(0, 10) * MINUTE, "submit": {
            "job": f"long{i}", "team": c.one(["a", "b"]), "gpus_per_worker": c.one([4, 8]),
            "runs_for": c.int(60, 180) * MINUTE, "time_limit": c.one([None, 240 * MINUTE])}})
    for i in range(c.int(6, 14)):
        inputs.append({"at": c.int(5, 90) * MINUTE + c.int(0, 59) * 1000, "submit": {
            "job": f"short{i}", "team": c.one(["a", "a", "b"]), "gpus_per_worker": c.one([2, 4, 8]),
            "runs_for": c.int(3, 30) * MINUTE, "priority_class": c.one([None, None, "high"])}})
    return time_shared_cell(inputs, quota_a=c.one([8, 16]), time_share=c.one(["WithinTeam", "Any"]),
                            min_runtime=c.one(["0s", "2m", "5m"]), checkpoint_grace=c.one(["0s", "1m"]),
                            consolidate=c.one([False, True]), checkpoint_every=c.one(["5m", None]))


def time_shared_cell(inputs: list[dict], quota_a: int, time_share: str, min_runtime: str, checkpoint_grace: str,
                     consolidate: bool, checkpoint_every: str | None, by_deadline: bool = True,
                     passes_reservations: bool = True) -> Scenario:
    """`time_shared`'s cell with these inputs and knobs (a pinned case names its own; one found while gangs went in
    submit order passes `by_deadline=False`, one found while only a gang's own team could pass its reservation
    `passes_reservations=False`)."""
    return parse({
        "name": "time-shared-cell",
        "cell": {"topology": ["block", "rack"], "nodes": [{"generate": {
            "count": 2, "gpus": 8, "gpu_type": "H100", "nodes_per_rack": 2, "racks_per_block": 1}}]},
        "cohorts": [{"name": "co"}],
        "teams": [{"name": "a", "cohort": "co", "quota": {"H100": quota_a}},
                  {"name": "b", "cohort": "co", "quota": {"H100": 8}}],
        "priority_classes": [{"name": "high", "value": 100}],
        "policy": {"admission": {"least_attained_service": True, "earliest_deadline_first": by_deadline,
                                 "priority_passes_reservations": passes_reservations},
                   "preemption": {"time_share": time_share, "min_runtime": min_runtime,
                                  "checkpoint_grace": checkpoint_grace, "consolidate": consolidate}},
        "agents": {"checkpoint_every": checkpoint_every, "checkpoint_delay": "20s", "heartbeat_every": "10s"},
        "tick": "30s", "until": "240m", "inputs": sorted(inputs, key=lambda i: i["at"]),
    }, "time-shared cell")
