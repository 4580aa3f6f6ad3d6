"""A service commits one batch's transaction on its writer thread while it decides the next (services/shell.py): the
next transaction begins only once that one has committed, the group's offsets pass a batch only once the decisions
before it are committed, and a transaction that fails fails the batch decided after it too, found at the next poll
even when no batch follows."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException

from events.log import LogRecord
from services.shell import ServiceShell, Timings

LOG = "log"


class Producer:
    """Records each transaction; one can be held open (`hold`) or made to fail (`fail`)."""

    def __init__(self) -> None:
        self.written: list[list[str]] = []
        self.hold = threading.Event()
        self.hold.set()
        self.fail = False

    def write(self, output, **_: object) -> None:
        assert self.hold.wait(10)
        if self.fail:
            raise KafkaException(KafkaError(KafkaError._FENCED, "fenced"))
        self.written.append(list(output))


class Consumer:
    def __init__(self) -> None:
        self.passed: list[list[int]] = []  # the offsets handed to the group, batch by batch
        self.commits_failing_since, self.decode_seconds = None, 0.0

    def commit_later(self, records: list[LogRecord]) -> None:
        self.passed.append([r.offset for r in records])

    def poll(self, batch_size: int, timeout: float) -> list[LogRecord]:
        return []

    def flush_commits(self) -> None:
        pass


class Replica:
    """Decides `decisions[offset]` on the record at that offset, nothing on the others."""

    def __init__(self, decisions: dict[int, str]) -> None:
        self.decisions, self.offset, self.assumed = decisions, -1, {}
        self.state = SimpleNamespace(offset=-1, now=0)

    def consume(self, offset: int, event: object) -> list[str]:
        self.offset = offset
        return [self.decisions[offset]] if offset in self.decisions else []


def shell_with(decisions: dict[int, str]) -> tuple[ServiceShell, SimpleNamespace]:
    shell = object.__new__(ServiceShell)  # no broker: only how batches' transactions follow one another
    shell.decider = SimpleNamespace(name="admitter", answers_refusals=False, side_input=None)
    shell.tracer, shell.timings, shell.topics = SimpleNamespace(on=False), Timings(), SimpleNamespace(events=LOG)
    shell.consumer, shell._writer = Consumer(), ThreadPoolExecutor(max_workers=1)
    shell._join_wanted, shell.decoded_before, shell.batch_size = False, 0.0, 10
    runtime = SimpleNamespace(cell="cell-0", partition=0, replica=Replica(decisions), producer=Producer(),
                              replay_until=0, written_to=0, writing=None, writing_consumed=[], unsaved=False,
                              saved_at=float("inf"))  # no save falls due
    shell.runtimes = {0: runtime}
    return shell, runtime


def records(*offsets: int) -> list[LogRecord]:
    return [LogRecord(LOG, 0, o, None, None, object()) for o in offsets]


def test_a_batch_is_decided_while_the_one_before_commits_and_written_only_after_it() -> None:
    shell, runtime = shell_with({1: "admit a", 5: "admit b"})
    runtime.producer.hold.clear()  # the first transaction stays open
    shell.process(runtime, records(0, 1), [])
    shell.process(runtime, records(2, 3), [])  # decided meanwhile, no decisions: its offsets wait
    assert runtime.producer.written == [] and shell.consumer.passed == []
    assert runtime.replica.offset == 3
    runtime.producer.hold.set()
    shell.process(runtime, records(4, 5), [])  # waits for the first to commit, then its own goes
    shell._settle(runtime)
    assert runtime.producer.written == [["admit a"], ["admit b"]]
    assert shell.consumer.passed == [[0, 1, 2, 3], [4, 5]]
    assert runtime.written_to == 6


def test_a_failed_transaction_fails_the_batch_decided_after_it() -> None:
    shell, runtime = shell_with({1: "admit a", 3: "admit b"})
    runtime.producer.fail = True
    shell.process(runtime, records(0, 1), [])
    with pytest.raises(KafkaException):
        shell.process(runtime, records(2, 3), [])
    assert runtime.producer.written == [] and shell.consumer.passed == [] and runtime.written_to == 0
    assert runtime.writing is None  # nothing left in flight: the cell is read again from its store


def test_a_failed_transaction_is_found_at_the_next_poll_when_no_batch_follows() -> None:
    shell, runtime = shell_with({1: "admit a"})
    runtime.producer.fail = True
    reopened: list[str] = []
    shell._reopen = lambda failed: reopened.append(failed.cell)
    shell.process(runtime, records(0, 1), [])
    runtime.writing.exception(10)  # the writer thread has failed it
    assert shell.poll_once() == 0
    assert reopened == ["cell-0"] and shell.consumer.passed == []
