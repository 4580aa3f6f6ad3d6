"""Benchmark: one service hop's transaction, timed alone, with one transactional id and with two taken in turns.

A service reads a record of the cell's log (read_committed), writes one event with the consumed offset in one
transaction (events/log.py `EventProducer.write`, signed as the services sign), and is ready for the next record
at once: the hop the intake and the admitter make for every submission. The benchmark times `write` for `--hops`
records one after the other, each fed when the last write returned, so every transaction begins right after a
commit, as under load. With one transactional id such a transaction meets CONCURRENT_TRANSACTIONS until the broker
has written the last commit's markers; with two in turn (`by_turns`) it does not. The two ways alternate, `--runs`
rounds each, on one broker and on three (every topic replicated three times, `min.insync.replicas` 2).

    python3 tests/benchmarks/bench_txn_hop.py [--hops 300] [--runs 3] [--brokers 1 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from confluent_kafka.admin import AdminClient  # noqa: E402

from events.auth import client_config  # noqa: E402
from events.broker import LocalKafka, find_free_base_port, quiet_logger  # noqa: E402
from events.log import EventConsumer, EventProducer  # noqa: E402
from events.models import Envelope, Tick  # noqa: E402
from events.topics import ensure_topics, topic_names  # noqa: E402
from replay.sim.metrics import percentile  # noqa: E402
from tests.conftest import use_admin_of  # noqa: E402

CELLS = ("cell-a",)
WARM_UP = 20


def tick(i: int) -> Tick:
    return Tick(envelope=Envelope(event_id=f"tick-{uuid.uuid4().hex[:8]}-{i}", cell="cell-a", at=i, producer="clock"))


def one_round(bootstrap: str, hops: int, by_turns: bool, replicas: int) -> list[float]:
    """Milliseconds each `write` took, after the warm-up."""
    prefix = f"bench-{uuid.uuid4().hex[:8]}."
    ensure_topics(AdminClient({**client_config(bootstrap), "logger": quiet_logger()}), CELLS, replicas, prefix=prefix)
    topics = topic_names(prefix)
    feeder = EventProducer(bootstrap, f"bench-feeder-{uuid.uuid4().hex}", topics, CELLS)
    hop = EventProducer(bootstrap, f"bench-hop-{uuid.uuid4().hex}", topics, CELLS, by_turns=by_turns)
    consumer = EventConsumer(bootstrap, f"bench-{uuid.uuid4().hex}", topics, CELLS, assign=list(CELLS))
    took = []
    try:
        for i in range(WARM_UP + hops):
            feeder.write([tick(2 * i)])
            records = []
            while not any(r.event is not None and r.event.envelope.producer == "clock"
                          and r.event.envelope.at == 2 * i for r in records):
                records += consumer.poll(100, 1.0)
            began = time.perf_counter()
            hop.write([tick(2 * i + 1)], consumer=consumer, consumed=records)
            if i >= WARM_UP:
                took.append((time.perf_counter() - began) * 1000)
    finally:
        consumer.close()
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hops", type=int, default=300)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--brokers", type=int, nargs="+", choices=(1, 3), default=[1, 3])
    args = parser.parse_args()
    for brokers in args.brokers:
        with tempfile.TemporaryDirectory(prefix="gangway-bench-") as scratch:
            kafka = LocalKafka(data_dir=Path(scratch), nodes=brokers, port=find_free_base_port(2 * brokers))
            bootstrap = kafka.start()
            use_admin_of(kafka)
            try:
                figures: dict[bool, list[tuple[float, float, float]]] = {False: [], True: []}
                for _ in range(args.runs):
                    for by_turns in (False, True):
                        took = sorted(one_round(bootstrap, args.hops, by_turns, kafka.replication_factor))
                        figures[by_turns].append((statistics.median(took), percentile(took, 90), percentile(took, 99)))
            finally:
                kafka.stop()
        for by_turns, rounds in figures.items():
            name = "two ids in turn" if by_turns else "one id"
            p50, p90, p99 = (statistics.median(column) for column in zip(*rounds))
            print(f"{brokers} broker(s), {name:15}: write p50 {p50:5.1f} ms, p90 {p90:5.1f} ms, p99 {p99:5.1f} ms "
                  f"(medians of {args.runs} rounds of {args.hops}; p50 per round "
                  f"{', '.join(f'{r[0]:.1f}' for r in rounds)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
