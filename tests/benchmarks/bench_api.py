"""Benchmark of the read model and the query API.

1. A log of N jobs (default 100,000) played by the four deciders in virtual time on a cell of 500 nodes x 8
   GPUs and 10 teams (some placed, most queued, 0.5 % cancelled), folded by the projector in batches of 2,000:
   projector throughput in events/s (fold + RocksDB write, no broker).
2. `gangway api`'s app served by uvicorn on 127.0.0.1 over that read model: p50 / p99 of a job lookup and of a
   filtered page of 100 jobs (team + state, following cursors), through HTTP with one keep-alive client.
3. With --kafka (or $KAFKA_BOOTSTRAP_SERVERS): submissions written to a real broker at --rate events/s for
   --seconds while a projector follows: lag from each transaction's commit to its fold, p50 / p99 / max.

    python3 tests/benchmarks/bench_api.py [--jobs 100000] [--lookups 2000] [--pages 500] [--kafka]
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import httpx  # noqa: E402
import uvicorn  # noqa: E402

from events import models as m  # noqa: E402
from events.auth import client_config
from events.broker import LocalKafka, find_free_base_port  # noqa: E402
from projections.readmodel.projector import Projector  # noqa: E402
from projections.readmodel.store import ReadModelStore  # noqa: E402
from replay.api.app import create_app  # noqa: E402
from replay.api.auth import Tokens  # noqa: E402
from replay.runner import VirtualCell  # noqa: E402
from tests import builders as b  # noqa: E402

TEAMS = [f"team-{i}" for i in range(10)]
TOKEN = "bench-operator-token"


def job_log(jobs: int, seed: int = 1) -> list[m.Event]:
    rng = random.Random(seed)
    cell = VirtualCell(cell="bench", tick_ms=10**15)  # no clock ticks: each submission is decided on arrival
    setup = [b.topology("block", "rack"),
             *[b.node(f"n{i:03d}", block=f"b{i // 64}", rack=f"r{i // 8 % 8}") for i in range(500)],
             b.priority("high", 10), b.priority("low", -5)]
    for team in TEAMS:
        setup += [b.team(team, cohort="all"), b.quota(team, 400)]
    cell.schedule_all(setup)
    for i in range(jobs):
        cell.schedule(b.job(f"job-{i:06d}", workers=rng.choice([1, 1, 2, 4]), gpus=rng.choice([1, 2, 4, 8]),
                            team=rng.choice(TEAMS), at=1000 + i * 10, time_limit_ms=rng.choice([1, 2, 4, 8]) * 3_600_000,
                            priority_class=rng.choice([None, None, "high", "low"])))
    cancels = sorted(rng.sample(range(jobs), jobs // 200))  # each cancel runs a full admission cycle
    cell.schedule_all(b.cancel(f"job-{i:06d}", at=1000 + jobs * 10 + k) for k, i in enumerate(cancels))
    cell.run_until(1000 + jobs * 10 + len(cancels) + 1)
    return cell.log


def percentiles(samples: list[float]) -> str:
    samples = sorted(samples)
    p = lambda q: samples[min(len(samples) - 1, int(q * len(samples)))] * 1000  # noqa: E731
    return f"p50 {p(0.5):.2f} ms, p99 {p(0.99):.2f} ms, max {samples[-1] * 1000:.2f} ms (n={len(samples)})"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def bench_http(projector: Projector, lookups: int, pages: int, rng: random.Random) -> None:
    app = create_app(projector, Tokens.parse({"operator": TOKEN}))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    base = f"http://127.0.0.1:{port}/api/v1/cells/bench"
    with projector.state("bench") as state:
        ids = sorted(state.jobs)
    with httpx.Client(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as client:
        client.get(f"{base}/jobs/{ids[0]}")  # warm-up (and the forecast of the waiting jobs, cached per offset)
        client.get(f"{base}/jobs/{next(i for i in ids if state.jobs[i].state.value == 'queued')}")
        took = []
        for job_id in rng.choices(ids, k=lookups):
            began = time.perf_counter()
            response = client.get(f"{base}/jobs/{job_id}")
            took.append(time.perf_counter() - began)
            assert response.status_code == 200, response.text
        print(f"job lookup over HTTP: {percentiles(took)}")
        took, cursor, rows = [], None, 0
        states = ["queued", "placed", "cancelled"]
        filters: dict = {}
        for i in range(pages):
            if cursor is None:
                filters = {"team": rng.choice(TEAMS), "state": rng.choice(states), "limit": 100}
            params = filters if cursor is None else {**filters, "cursor": cursor}
            began = time.perf_counter()
            response = client.get(f"{base}/jobs", params=params)
            took.append(time.perf_counter() - began)
            assert response.status_code == 200, response.text
            body = response.json()
            rows += len(body["jobs"])
            cursor = body["next_cursor"] if i % 5 != 4 else None  # follow a few pages, then a new filter
        print(f"filtered page of 100 over HTTP: {percentiles(took)}, {rows / pages:.0f} rows per page on average")
    server.should_exit = True
    thread.join(10)


def bench_kafka(bootstrap: str, rate: float, seconds: float, scratch: Path) -> None:
    from confluent_kafka.admin import AdminClient

    from events.broker import quiet_logger
    from events.topics import ensure_topics, topic_names
    from tests.integration.control_plane import Operator

    prefix = f"bench-api-{uuid.uuid4().hex[:6]}."
    ensure_topics(AdminClient({**client_config(bootstrap), "logger": quiet_logger()}), ["cell-a"], 1,
                  prefix=prefix)
    topics = topic_names(prefix)
    operator = Operator(bootstrap, topics)
    operator.cell(nodes=8)
    folded_at: dict[str, float] = {}

    def on_batch(cell: str, offset: int, items: list) -> None:
        now = time.perf_counter()
        for item in items:
            if item["job_id"]:
                folded_at.setdefault(item["job_id"], now)

    projector = Projector(ReadModelStore(scratch / "kafka-readmodel"), ["cell-a"], bootstrap, topics=topics,
                          on_batch=on_batch)
    stop = threading.Event()
    follower = threading.Thread(target=projector.follow, args=(stop,), daemon=True)
    follower.start()
    time.sleep(2)
    committed: dict[str, float] = {}
    began = time.perf_counter()
    for i in range(int(rate * seconds)):
        due = began + i / rate
        time.sleep(max(0.0, due - time.perf_counter()))
        operator.submit(f"lag-{i}")
        committed[f"lag-{i}"] = time.perf_counter()
    deadline = time.perf_counter() + 30
    while len(folded_at) < len(committed) and time.perf_counter() < deadline:
        time.sleep(0.1)
    stop.set()
    follower.join(10)
    offered = len(committed) / (max(committed.values()) - began)
    lags = [folded_at[j] - t for j, t in committed.items() if j in folded_at]
    print(f"following the broker at {offered:.0f} events/s offered (one transaction each): fold lag {percentiles(lags)}"
          f", {len(lags)}/{len(committed)} folded")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--lookups", type=int, default=2000)
    parser.add_argument("--pages", type=int, default=500)
    parser.add_argument("--kafka", action="store_true", help="also measure lag on a broker (local one if no env)")
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as scratch:
        began = time.perf_counter()
        log = job_log(args.jobs)
        print(f"log: {len(log):,} events for {args.jobs:,} jobs, played by the deciders in {time.perf_counter() - began:.0f} s")
        projector = Projector(ReadModelStore(Path(scratch) / "readmodel"), ["bench"])
        records = list(enumerate(log))
        began = time.perf_counter()
        for i in range(0, len(records), 2000):
            projector.fold("bench", records[i:i + 2000])
        seconds = time.perf_counter() - began
        summary = projector.store.summary("bench")
        print(f"projector: {len(log):,} events in {seconds:.1f} s = {len(log) / seconds:,.0f} events/s "
              f"(batches of 2,000); jobs by state {summary['jobs']}")
        bench_http(projector, args.lookups, args.pages, rng)
        if args.kafka:
            bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
            kafka = None
            if not bootstrap:
                kafka = LocalKafka(data_dir=Path(scratch) / "kafka", port=find_free_base_port(2))
                bootstrap = kafka.start()
            try:
                bench_kafka(bootstrap, args.rate, args.seconds, Path(scratch))
            finally:
                if kafka is not None:
                    kafka.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
