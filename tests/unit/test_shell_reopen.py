"""A service opening a cell (assigned to it, or reopened after a failed batch) asks the group for the cell's committed
offset once, briefly; when the group does not say it (all brokers just restarted), the replica gives up its cells and
joins its group again with a new consumer, instead of retrying for minutes deaf to SIGTERM (services/shell.py). It
decides again only past the later of that offset and its latest decision's basis on the log."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from services import shell as shell_module
from services.shell import ServiceShell


class Raw:
    def __init__(self, committed: int | None) -> None:
        self.committed_offset, self.asked = committed, []

    def committed(self, partitions, timeout: float):
        self.asked.append(timeout)
        if self.committed_offset is None:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "Failed to get committed offsets"))
        return [TopicPartition(p.topic, p.partition, self.committed_offset) for p in partitions]


class Consumer:
    def __init__(self, committed: int | None = 0) -> None:
        self.raw, self.sought, self.closed, self.decode_seconds = Raw(committed), [], threading.Event(), 0.5

    def seek_to(self, partition: int, offset: int, topic: str | None = None) -> None:
        self.sought.append((partition, offset))

    def close(self) -> None:
        self.closed.set()


class Store:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def runtime(partition: int, offset: int) -> SimpleNamespace:
    return SimpleNamespace(partition=partition, cell=f"cell-{partition}", store=Store(), replay_until=0,
                           written_to=offset, unsaved=False, replica=SimpleNamespace(offset=offset),
                           heartbeat_offset=0)


def shell_with(committed: int | None, latest_basis: int = -1) -> tuple[ServiceShell, list[Consumer]]:
    shell = object.__new__(ServiceShell)  # no broker: only the reopening of a cell is under test
    joined: list[Consumer] = []
    looked: list[int] = []

    def latest(runtime, start: int) -> int:  # the log as the scan would find it: its latest decision's basis
        looked.append(start)
        return latest_basis

    def join() -> Consumer:
        joined.append(Consumer())
        return joined[-1]

    shell._join = join
    shell.decider = SimpleNamespace(name="admitter", side_input=None)
    shell.topics = SimpleNamespace(events="events", heartbeats="heartbeats")
    shell.consumer = Consumer(committed)
    shell.runtimes = {0: runtime(0, 41), 1: runtime(1, 7)}
    shell.decoded_before, shell._closing, shell.unowned_since = 0.0, None, None

    def reopened(partition: int) -> SimpleNamespace:
        shell.runtimes[partition] = runtime(partition, 30)  # what its store held
        return shell.runtimes[partition]

    shell._open = reopened
    shell._latest_basis, shell.looked = latest, looked
    return shell, joined


def test_a_cell_reopens_from_its_store_with_the_committed_offset_as_the_replay_bound() -> None:
    shell, joined = shell_with(committed=45)
    failed = shell.runtimes[0]
    shell._reopen(failed)
    assert shell.consumer.raw.asked == [shell_module.COMMITTED_WAIT_S]
    assert shell.runtimes[0].replay_until == 45 and shell.consumer.sought == [(0, 31)]
    assert failed.store.closed and not joined


def test_a_cell_reopens_past_its_latest_decision_when_that_is_past_the_committed_offset() -> None:
    shell, joined = shell_with(committed=45, latest_basis=52)
    shell._reopen(shell.runtimes[0])
    assert shell.looked == [45]  # from the committed offset on: before it, every record was decided
    assert shell.runtimes[0].replay_until == 53 and shell.consumer.sought == [(0, 31)]


def test_a_group_that_does_not_say_the_committed_offset_is_joined_again_with_a_new_consumer() -> None:
    shell, joined = shell_with(committed=None)
    stuck, others = shell.consumer, shell.runtimes[1]
    shell._reopen(shell.runtimes[0])
    assert stuck.raw.asked == [shell_module.COMMITTED_WAIT_S]  # asked once, briefly
    assert stuck.sought == [] and shell.runtimes == {}
    assert others.store.closed  # every cell given up, as a revoke gives them up
    assert joined and shell.consumer is joined[0]
    assert stuck.closed.wait(5)  # the stuck consumer leaves the group


class Assigned:
    """The raw consumer a rebalance callback is handed: what it is told to read."""

    def __init__(self) -> None:
        self.starts: list[tuple[str, int, int]] = []

    def assign(self, starts: list[TopicPartition]) -> None:
        self.starts = [(t.topic, t.partition, t.offset) for t in starts]


def assigning(committed: int | None, latest_basis: int = -1) -> tuple[ServiceShell, list[Consumer], Assigned]:
    shell, joined = shell_with(committed, latest_basis)
    shell.runtimes, shell._join_wanted = {}, False
    shell.decider = SimpleNamespace(name="placer", side_input=True)
    return shell, joined, Assigned()


def test_an_assigned_cell_opens_with_the_committed_offset_as_the_replay_bound() -> None:
    shell, joined, raw = assigning(committed=45)
    shell._on_assign(raw, [TopicPartition("events", 0), TopicPartition("heartbeats", 0)])
    assert shell.consumer.raw.asked == [shell_module.COMMITTED_WAIT_S]
    assert shell.runtimes[0].replay_until == 45
    assert raw.starts == [("events", 0, 31), ("heartbeats", 0, 0)]
    assert not shell._join_wanted and not joined


def test_an_assigned_cell_with_no_committed_offset_decides_again_only_past_its_latest_decision() -> None:
    shell, joined, raw = assigning(committed=-1001, latest_basis=40)  # librdkafka: no offset committed
    shell._on_assign(raw, [TopicPartition("events", 0)])
    assert shell.looked == [31]  # from its store's offset on
    assert shell.runtimes[0].replay_until == 41 and raw.starts == [("events", 0, 31)]


def test_an_assignment_the_group_gives_no_offset_for_is_not_opened_and_the_group_joined_again() -> None:
    shell, joined, raw = assigning(committed=None)
    stuck = shell.consumer
    shell._on_assign(raw, [TopicPartition("events", 0), TopicPartition("heartbeats", 0)])
    assert stuck.raw.asked == [shell_module.COMMITTED_WAIT_S]  # asked once, briefly, inside the callback
    assert shell.runtimes == {} and raw.starts == []  # neither the cell nor its heartbeats are read
    stuck.poll = lambda batch_size, timeout: []
    shell.batch_size = 100
    assert shell.poll_once() == 0  # once the callback has returned: a new consumer joins the group
    assert joined and shell.consumer is joined[0] and stuck.closed.wait(5)
    assert not shell._join_wanted


class Log:
    """A cell's log as `_latest_basis` reads it: (offset, event) pairs, read by chunks it rewinds to."""

    def __init__(self, records: list) -> None:
        self.records, self.start, self.reads = records, 0, []

    def __call__(self, cells, bootstrap, start, *args, **kwargs) -> Log:  # stands in for the LogReader class
        self.start = start
        return self

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *_: object) -> None:
        pass

    def end_offsets(self) -> dict[str, int]:
        return {"cell-0": len(self.records)}

    def rewind(self, start: int) -> None:
        self.start = start

    def read(self, to: int):
        self.reads.append((self.start, to))
        return [SimpleNamespace(offset=o, event=e) for o, e in self.records[self.start:to + 1]]


def decision(producer: str, basis: int | None) -> SimpleNamespace:
    return SimpleNamespace(producer=producer, envelope=SimpleNamespace(basis_offset=basis))


def scanning(monkeypatch, records: list) -> tuple[ServiceShell, Log, SimpleNamespace]:
    log = Log(records)
    monkeypatch.setattr(shell_module, "LogReader", log)
    monkeypatch.setattr(shell_module, "SCAN_CHUNK", 10)
    shell = object.__new__(ServiceShell)
    shell.bootstrap, shell.cells, shell.topics, shell.principal = "kafka", ("cell-0",), None, None
    replica = SimpleNamespace(own=lambda event: event is not None and event.producer == "admitter")
    return shell, log, SimpleNamespace(cell="cell-0", replica=replica)


def test_the_latest_decision_is_looked_for_from_the_end_back_in_doubling_chunks(monkeypatch) -> None:
    records = [(o, None) for o in range(100)]
    records[30] = (30, decision("admitter", 28))
    records[40] = (40, decision("placer", 39))  # another service's: not this replica's
    records[95] = (95, decision("admitter", 10**9))  # a basis past the record itself: no decision is based so
    records[96] = (96, decision("admitter", -1))
    records[97] = (97, decision("admitter", None))
    shell, log, runtime = scanning(monkeypatch, records)
    assert shell._latest_basis(runtime, 5) == 28
    assert log.reads == [(90, 99), (70, 89), (30, 69)]  # 10 records, then 20, then 40: found in the third


def test_no_decision_since_the_start_leaves_nothing_decided_past_it(monkeypatch) -> None:
    records = [(o, None) for o in range(100)]
    records[3] = (3, decision("admitter", 2))  # before the start: the store or the group says as much already
    shell, log, runtime = scanning(monkeypatch, records)
    assert shell._latest_basis(runtime, 20) == -1
    assert log.reads == [(90, 99), (70, 89), (30, 69), (20, 29)]  # no further back than the start
