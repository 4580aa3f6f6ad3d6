"""The clock process: writes a `Tick` to every cell's partition at a fixed interval, so deadlines
expire at a definite position in the log. With `speedup`, event time runs faster than the wall
clock (for demos); decisions stay deterministic because deciders only read time from events."""

from __future__ import annotations

import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass

from confluent_kafka import Producer

from events.broker import quiet_logger
from events.codec import EventCodec
from events.models import Envelope, Tick
from events.topics import TopicNames, cell_partition


@dataclass
class VirtualClock:
    """Event time: the wall clock at start, then advancing `speedup` times faster."""

    speedup: float = 1.0
    started_wall: float = 0.0
    started_at_ms: int = 0

    @classmethod
    def starting_now(cls, speedup: float = 1.0) -> VirtualClock:
        now = time.time()
        return cls(speedup, now, int(now * 1000))

    def now_ms(self) -> int:
        return self.started_at_ms + int((time.time() - self.started_wall) * 1000 * self.speedup)


def run_clock(bootstrap_servers: str, topics: TopicNames, cells: Sequence[str], interval_s: float,
              clock: VirtualClock, max_ticks: int | None = None) -> int:
    """Ticks until SIGTERM / SIGINT (or `max_ticks` rounds); returns the number of rounds."""
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(True))
    producer = Producer({"bootstrap.servers": bootstrap_servers, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "logger": quiet_logger()})
    codec = EventCodec()
    rounds = 0
    while not stopping and (max_ticks is None or rounds < max_ticks):
        at = clock.now_ms()
        for cell in cells:
            tick = Tick(envelope=Envelope(event_id=f"clock-{cell}-{at}", cell=cell, at=at, producer="clock"))
            producer.produce(topics.events, key=cell.encode(), value=codec.encode(tick),
                             partition=cell_partition(cells, cell))
        producer.poll(0)
        rounds += 1
        time.sleep(interval_s)
    producer.flush(30)
    return rounds
