"""The read model's projector through a broker outage: it waits and follows on, counting no cell as caught up
meanwhile (the lag grows from the last moment one was); an error no failover explains stops it."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException

from projections.readmodel import projector as projector_module
from projections.readmodel.projector import Projector
from projections.readmodel.store import ReadModelStore


class OutageReader:
    """A log reader whose polls fail with `errors` in turn, then find nothing and stop the projector; the log's end
    cannot be asked for while `down`."""

    def __init__(self, errors: list[KafkaError], stop: threading.Event, down: bool) -> None:
        self.errors, self.stop, self.down, self.polls = errors, stop, down, 0
        self.asked: list[tuple[float, int]] = []

    def poll(self, timeout: float) -> list:
        self.polls += 1
        if self.errors:
            raise KafkaException(self.errors.pop(0))
        self.stop.set()
        return []

    def end_offsets(self, timeout: float = 30, attempts: int = 20) -> dict[str, int]:
        self.asked.append((timeout, attempts))
        if self.down:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "no broker answers"))
        return {"cell-a": 0}

    def position(self, cell: str) -> int:
        return 0


def following(tmp_path: Path, errors: list[KafkaError], down: bool = False) -> tuple[Projector, OutageReader,
                                                                                     threading.Event]:
    projector = Projector(ReadModelStore(tmp_path / "read-model"), ["cell-a"])
    stop = threading.Event()
    reader = OutageReader(errors, stop, down)

    @contextmanager
    def opened():
        yield reader

    projector._reader = opened  # no broker: only the loop's handling of its errors is under test
    return projector, reader, stop


def test_a_broker_outage_is_waited_out_and_counts_as_lag(tmp_path: Path):
    down = KafkaError(KafkaError._ALL_BROKERS_DOWN, "all brokers down")
    projector, reader, stop = following(tmp_path, [down], down=True)
    projector.follow(stop)
    assert reader.polls == 2  # polled again after the outage
    assert projector.lag["cell-a"].behind >= 1  # not caught up: its seconds count from the last time it was


def test_once_the_brokers_answer_it_is_caught_up_again(tmp_path: Path):
    projector, _, stop = following(tmp_path, [KafkaError(KafkaError._ALL_BROKERS_DOWN, "all brokers down")])
    projector.follow(stop)
    assert projector.lag["cell-a"].behind == 0


def test_an_error_no_failover_explains_stops_it(tmp_path: Path):
    projector, _, stop = following(tmp_path, [KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "not allowed")])
    with pytest.raises(KafkaException):
        projector.follow(stop)


def test_a_new_leader_whose_high_watermark_lags_is_waited_out(tmp_path: Path):
    """Seen in the broker-fault test right after a failover: the projector's thread had died on it."""
    lagging = KafkaError(KafkaError.OFFSET_NOT_AVAILABLE, "Leader high watermark is not caught up")
    projector, reader, stop = following(tmp_path, [lagging])
    projector.follow(stop)
    assert reader.polls == 2


def test_the_lag_is_asked_once_briefly_so_folding_goes_on(tmp_path: Path):
    """Retried for minutes as a one-off read retries it, a watermark query that the brokers do not answer would hold
    up the folding of what keeps arriving; one short try that fails counts as an outage."""
    projector, reader, stop = following(tmp_path, [], down=True)
    projector.follow(stop)
    assert reader.asked and all(attempts == 1 and timeout <= 5 for timeout, attempts in reader.asked)
    assert projector.lag["cell-a"].behind >= 1


class Log:
    """A cell's log of ten records, read as librdkafka would: a poll that meets an error has taken the records
    before it out of the client, and returns none of them."""

    def __init__(self, fail_at: int) -> None:
        self.fail_at, self.readers, self.stop = fail_at, [], threading.Event()

    def reader(self, cells, bootstrap, starts, all_cells, topics) -> LogReaderOnLog:
        self.readers.append(starts["cell-a"])
        return LogReaderOnLog(self, starts["cell-a"])


class LogReaderOnLog:
    def __init__(self, log: Log, start: int) -> None:
        self.log, self.next = log, start

    def __enter__(self) -> LogReaderOnLog:
        return self

    def __exit__(self, *_: object) -> None:
        pass

    def poll(self, timeout: float) -> list:
        if self.next >= 10:
            self.log.stop.set()
            return []
        taken = range(self.next, min(self.next + 3, 10))
        self.next = taken[-1] + 1
        if self.log.fail_at in taken:
            self.log.fail_at = -1  # once
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "broker gone"))
        return [SimpleNamespace(offset=offset, event=None) for offset in taken]

    def cell_of(self, record) -> str:
        return "cell-a"

    def end_offsets(self, timeout: float = 30, attempts: int = 20) -> dict[str, int]:
        return {"cell-a": 10}

    def position(self, cell: str) -> int:
        return self.next


def test_after_an_outage_it_reads_on_from_what_it_folded_so_no_record_is_skipped(tmp_path: Path, monkeypatch):
    log = Log(fail_at=4)  # the second poll takes 3-5 and fails
    monkeypatch.setattr(projector_module, "LogReader", log.reader)
    projector = Projector(ReadModelStore(tmp_path / "read-model"), ["cell-a"], "127.0.0.1:1")
    folded: list[int] = []
    fold = projector.fold
    projector.fold = lambda cell, records: (folded.extend(o for o, _ in records), fold(cell, records))
    projector.follow(log.stop)
    assert log.readers == [0, 3]  # a new reader from the first offset not folded
    assert folded == list(range(10))
