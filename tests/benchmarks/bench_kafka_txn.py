"""Benchmark: transactional produce-and-consume throughput of typed events on one local Kafka node.

Each run writes N JobSubmitted events in transactions of B events (EventProducer, acks=all,
idempotent) and reads them back read_committed with EventConsumer, decoding every record.
Prints events/s for producing (until the last commit), consuming, and end to end, as the median
of R runs on a fresh topic each. Starts its own broker on free ports unless
KAFKA_BOOTSTRAP_SERVERS is set.

    python3 tests/benchmarks/bench_kafka_txn.py [--events 20000] [--batch 500] [--runs 5] [--no-sasl]

The broker it starts has SASL/SCRAM and ACLs on, as `gangway kafka start` does (the clients are its admin);
--no-sasl starts a plaintext one, to compare.
"""

from __future__ import annotations

import argparse
import os
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
from events.models import Envelope, JobSubmitted  # noqa: E402
from events.topics import ensure_topics, topic_names  # noqa: E402

CELLS = ("cell-a",)


def one_run(bootstrap: str, events: int, batch: int) -> tuple[float, float, float]:
    prefix = f"bench-{uuid.uuid4().hex[:8]}."
    ensure_topics(AdminClient({**client_config(bootstrap), "logger": quiet_logger()}), CELLS, 1, prefix=prefix)
    topics = topic_names(prefix)
    jobs = [JobSubmitted(envelope=Envelope(event_id=f"e{i}", cell="cell-a", at=i, producer="bench"),
                         job_id=f"job-{i}", team="nlp", workers=4, gpus_per_worker=8, gpu_type="H100")
            for i in range(events)]
    producer = EventProducer(bootstrap, f"bench-{uuid.uuid4().hex}", topics, CELLS)
    began = time.perf_counter()
    for start in range(0, events, batch):
        with producer.transaction():
            for job in jobs[start:start + batch]:
                producer.produce(job)
    produced = time.perf_counter()
    consumer = EventConsumer(bootstrap, f"bench-{uuid.uuid4().hex}", topics, CELLS, assign=list(CELLS))
    setup = time.perf_counter() - produced  # joining and fetching committed offsets: not throughput
    seen = 0
    while seen < events:
        seen += sum(1 for r in consumer.poll(max_records=1000, timeout=1.0) if r.event is not None)
    consumed = time.perf_counter()
    consumer.close()
    return events / (produced - began), events / (consumed - produced - setup), events / (consumed - began - setup)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=500, help="events per transaction")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--no-sasl", action="store_true", help="start a plaintext broker (no SASL, no ACLs)")
    args = parser.parse_args()
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    with tempfile.TemporaryDirectory(prefix="gangway-bench-") as scratch:
        kafka = None if bootstrap else LocalKafka(data_dir=Path(scratch), port=find_free_base_port(2),
                                                  sasl=not args.no_sasl)
        try:
            bootstrap = bootstrap or kafka.start()
            if kafka is not None and kafka.admin_credentials is not None:
                os.environ["GANGWAY_KAFKA_USER"] = kafka.admin_credentials.user
                os.environ["GANGWAY_KAFKA_PASSWORD"] = kafka.admin_credentials.password
            runs = [one_run(bootstrap, args.events, args.batch) for _ in range(args.runs)]
        finally:
            if kafka is not None:
                kafka.stop()
    for name, column in zip(("produce (txn)", "consume (read_committed)", "end to end"), zip(*runs)):
        print(f"{name:26} median {statistics.median(column):>9,.0f} events/s   "
              f"runs: {', '.join(f'{v:,.0f}' for v in column)}")
    security = "plaintext" if args.no_sasl or kafka is None else "SASL/SCRAM-SHA-512 + ACLs"
    print(f"{args.events:,} JobSubmitted events per run, {args.batch} per transaction, {args.runs} runs, one node, "
          f"{security}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
