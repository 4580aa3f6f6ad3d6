"""A replica that owns no cell while its consumer stays out of step with its group joins again with a new consumer
(services/shell.py); a standby replica, steady in its group with nothing assigned, keeps its consumer."""

from __future__ import annotations

import json
import threading

from services import shell as shell_module
from services.shell import UNSETTLED_S, ServiceShell


class FakeConsumer:
    def __init__(self) -> None:
        self.closed = threading.Event()
        self.decode_seconds = 0.25

    def close(self) -> None:
        self.closed.set()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def idle_shell(monkeypatch) -> tuple[ServiceShell, list[FakeConsumer], Clock]:
    clock = Clock()
    monkeypatch.setattr(shell_module.time, "monotonic", clock)
    shell = object.__new__(ServiceShell)  # no broker: only the rejoin rule is under test
    made: list[FakeConsumer] = []

    def join() -> FakeConsumer:
        made.append(FakeConsumer())
        return made[-1]

    shell._join = join
    shell.decider = type("D", (), {"name": "admitter"})()
    shell.runtimes, shell.group, shell.unsettled_since, shell.unowned_since = {}, ("", ""), None, clock.now
    shell.decoded_before, shell._closing = 0.0, None
    shell.consumer = join()
    return shell, made, clock


def stats(state: str, join_state: str) -> str:
    return json.dumps({"cgrp": {"state": state, "join_state": join_state, "assignment_size": 0}})


def test_a_consumer_out_of_step_with_its_group_is_replaced(monkeypatch) -> None:
    shell, made, clock = idle_shell(monkeypatch)
    shell._on_stats(stats("up", "wait-join"))
    clock.now += UNSETTLED_S - 1
    shell._on_stats(stats("up", "wait-join"))
    shell._rejoin_if_stuck()
    assert len(made) == 1  # not yet
    clock.now += 2
    shell._rejoin_if_stuck()
    assert len(made) == 2 and shell.consumer is made[1]
    assert made[0].closed.wait(5)
    assert shell.decoded_before == 0.25
    shell._on_stats(stats("up", "wait-join"))
    clock.now += UNSETTLED_S + 1
    shell._rejoin_if_stuck()
    assert len(made) == 3  # out of step again, for as long: once more


def test_one_replaced_consumer_leaves_at_a_time(monkeypatch) -> None:
    shell, made, clock = idle_shell(monkeypatch)
    leaving = threading.Event()
    made[0].close = leaving.wait  # a close that waits for a coordinator that does not answer
    shell._on_stats(stats("wait-coord", "init"))
    clock.now += UNSETTLED_S + 1
    shell._rejoin_if_stuck()
    shell._on_stats(stats("wait-coord", "init"))
    clock.now += UNSETTLED_S + 1
    shell._rejoin_if_stuck()
    assert len(made) == 2  # the first is still leaving: no third
    leaving.set()
    shell._closing.join(5)
    shell._rejoin_if_stuck()
    assert len(made) == 3


def test_a_standby_replica_steady_with_nothing_assigned_keeps_its_consumer(monkeypatch) -> None:
    shell, made, clock = idle_shell(monkeypatch)
    shell._on_stats(stats("query-coord", "init"))
    clock.now += 10
    shell._on_stats(stats("up", "steady"))  # settled: the clock starts again when it next falls out of step
    clock.now += UNSETTLED_S * 10
    shell._rejoin_if_stuck()
    assert len(made) == 1 and not made[0].closed.is_set()


def test_a_replica_that_owns_a_cell_keeps_its_consumer(monkeypatch) -> None:
    shell, made, clock = idle_shell(monkeypatch)
    shell.runtimes = {0: object()}
    shell._on_stats(stats("wait-coord", "init"))
    clock.now += UNSETTLED_S * 10
    shell._rejoin_if_stuck()
    assert len(made) == 1


def test_a_replaced_consumers_callbacks_no_longer_count(monkeypatch) -> None:
    """While it closes, the old consumer may still report or serve a rebalance: the replica ignores it."""

    class Recording:
        def __init__(self, *args, stats_cb, **config) -> None:
            self.stats_cb = stats_cb

        def subscribe(self, topics, on_assign, on_revoke) -> None:
            self.on_assign, self.on_revoke = on_assign, on_revoke

    monkeypatch.setattr(shell_module, "EventConsumer", Recording)
    shell = object.__new__(ServiceShell)
    shell.bootstrap, shell.name_prefix, shell.cells, shell.principal = "b", "", ("cell-a",), None
    shell.topics = type("T", (), {"events": "e", "heartbeats": "h"})()
    shell.decider = type("D", (), {"name": "admitter", "side_input": False})()
    shell.group, shell.unsettled_since = ("", ""), None
    assigned = []
    monkeypatch.setattr(shell, "_on_assign", lambda consumer, partitions: assigned.append(partitions), raising=False)
    old = shell._join()
    new = shell._join()
    old.stats_cb(stats("wait-coord", "init"))
    old.on_assign(None, ["p0"])
    assert shell.group == ("", "") and assigned == []
    new.stats_cb(stats("up", "steady"))
    new.on_assign(None, ["p0"])
    assert shell.group == ("up", "steady") and assigned == [["p0"]]
