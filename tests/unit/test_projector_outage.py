"""The read model's projector through a broker outage: it waits and follows on, counting no cell as caught up
meanwhile (the lag grows from the last moment one was); an error no failover explains stops it."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException

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
