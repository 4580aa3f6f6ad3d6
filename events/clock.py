"""The clock process: writes a `Tick` to every cell's partition at a fixed interval, so deadlines
expire at a definite position in the log. With `speedup`, event time runs faster than the wall
clock (for demos); decisions stay deterministic because deciders only read time from events.

Every process that stamps event time (clock, fleet, load) must share the speedup *and* the epoch
(`--epoch` / $GANGWAY_EPOCH): two clocks started Δ seconds apart with speedup X otherwise disagree
by Δ·(X−1) seconds of event time, enough for recovery to find every heartbeat stale."""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass

from confluent_kafka import KafkaException, Producer

from events.auth import client_config, service_principal, signer
from events.broker import quiet_logger
from events.codec import EventCodec
from events.log import transient
from events.models import Envelope, Tick
from events.topics import TopicNames, cell_partition

log = logging.getLogger("gangway.clock")


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

    @classmethod
    def anchored(cls, speedup: float = 1.0, epoch_s: float | None = None) -> VirtualClock:
        """Event time equals the wall clock at `epoch_s` (Unix seconds; default now) and runs `speedup` times faster."""
        if epoch_s is None:
            return cls.starting_now(speedup)
        return cls(speedup, epoch_s, int(epoch_s * 1000))

    def now_ms(self) -> int:
        return self.started_at_ms + int((time.time() - self.started_wall) * 1000 * self.speedup)


def epoch_from_env(env=os.environ) -> float | None:
    """$GANGWAY_EPOCH (Unix seconds), the shared anchor of every virtual clock of one run; None when unset."""
    raw = env.get("GANGWAY_EPOCH", "").strip()
    return float(raw) if raw else None


def speedup_from_env(env=os.environ) -> float:
    """$GANGWAY_SPEEDUP, how much faster than the wall clock event time runs for launchers and agents (default 1)."""
    raw = env.get("GANGWAY_SPEEDUP", "").strip()
    return float(raw) if raw else 1.0


def run_clock(bootstrap_servers: str, topics: TopicNames, cells: Sequence[str], interval_s: float,
              clock: VirtualClock, max_ticks: int | None = None) -> int:
    """Ticks until SIGTERM / SIGINT (or `max_ticks` rounds); returns the number of rounds."""
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(True))
    producer = Producer(client_config(bootstrap_servers, service_principal("clock"), **{
        "enable.idempotence": True, "acks": "all", "linger.ms": 5, "logger": quiet_logger()}))
    codec = EventCodec()
    signing = signer(service_principal("clock"), bootstrap_servers)  # readers refuse a Tick the clock did not sign
    rounds = 0
    while not stopping and (max_ticks is None or rounds < max_ticks):
        at = clock.now_ms()
        for cell in cells:
            tick = Tick(envelope=Envelope(event_id=f"clock-{cell}-{at}", cell=cell, at=at, producer="clock"))
            value, partition = codec.encode(tick), cell_partition(cells, cell)
            headers = signing.sign(topics.events, partition, [value])[0] if signing is not None else None
            try:
                producer.produce(topics.events, key=cell.encode(), value=value, partition=partition, headers=headers)
            except KafkaException as error:  # a Tick missed is made up by the next one; a dead clock is not
                if not transient(error):
                    raise
                log.warning("clock: no Tick for %s at %d (%s); the next round brings one", cell, at, error)
        producer.poll(0)
        rounds += 1
        time.sleep(interval_s)
    producer.flush(30)
    return rounds
