"""Benchmark of the control plane on Kafka: submit-to-placed latency and sustained throughput.

One cell per phase, of 8-GPU nodes in racks of 11, with room for every gang the phase submits (its warm-up's
included: 286 nodes by default); the four services and the intake run as separate processes with exactly-once
transactions and RocksDB projections; single-GPU gangs. Each phase first warms up, unmeasured, as a cell that has
been running is warm: it waits until 20 gangs have been placed (the intake has found the team's input topic and
every service owns the cell), then submits at phase 1's rate for --warm-up-s seconds (default 1) and waits until
those are placed too (the broker's compiled code and each process's caches are warm; --warm-up-s 0 measures a
plane fresh from idle, whose first second is slower). Phase 1 submits at a fixed rate
(default 200/s for 10 s) and reports submit-to-placed latency p50 / p99 (wall clock from the launcher's produce()
to the moment a reader sees JobPlaced), split in two at the moment the admitter produced JobPlaced (the record's
CreateTime): submit-to-decided (the submission's delivery, the intake's hop, the admitter's fetch and decision)
and decided-to-visible (its transaction's commit and the reader's fetch of what it committed).
Phase 2 (a fresh cell and topics) submits 2,000 gangs as fast as one producer can and reports
gangs placed per second from the first submission to the last placement.

    python3 tests/benchmarks/bench_control_plane.py [--rate 200] [--seconds 10] [--burst 2000] [--warm-up-s 1]
                                                    [--direct] [--brokers 1|3] [--unsigned]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

from events import models as m  # noqa: E402
from events.auth import SIGNING_KEY_ENV, WRITER_KEYS_ENV, client_config  # noqa: E402
from events.broker import LocalKafka, find_free_base_port, quiet_logger  # noqa: E402
from events.codec import EventCodec  # noqa: E402
from events.reader import LogReader  # noqa: E402
from events.submission import job_submitted  # noqa: E402
from events.topics import ensure_topics, topic_names  # noqa: E402
from tests.conftest import use_admin_of  # noqa: E402
from tests.integration.control_plane import ControlPlane, Operator  # noqa: E402


class PlacedWatcher(threading.Thread):
    """Reads the cell log and stamps the wall-clock time each JobPlaced is seen."""

    def __init__(self, bootstrap: str, topics) -> None:
        super().__init__(daemon=True)
        self.reader = LogReader(["cell-a"], bootstrap, all_cells=["cell-a"], topics=topics)
        self.placed: dict[str, float] = {}
        self.decided: dict[str, float] = {}  # job -> wall-clock time its JobPlaced was produced
        self.seen: dict[str, float] = {}  # job -> wall-clock time it was seen
        self.logged: dict[str, float] = {}  # job -> wall-clock time its JobSubmitted was produced onto the log
        self.stop = False

    def run(self) -> None:
        while not self.stop:
            for record in self.reader.poll(0.05):
                if isinstance(record.event, m.JobSubmitted):
                    self.logged.setdefault(record.event.job_id, record.timestamp_ms / 1000)
                if isinstance(record.event, m.JobPlaced) and record.event.job_id not in self.placed:
                    self.placed[record.event.job_id] = time.perf_counter()
                    self.seen[record.event.job_id] = time.time()
                    self.decided[record.event.job_id] = record.timestamp_ms / 1000
        self.reader.close()


#: Gangs placed first, before the warm-up at the phase's rate: the intake has found the team's input topic.
FIRST_GANGS = 20
#: Nodes per rack of the benchmark's cells.
RACK = 11


def setup(bootstrap: str, state: Path, name: str, gangs: int):
    import os
    prefix = f"bench-{name}-{uuid.uuid4().hex[:6]}."
    os.environ["GANGWAY_TOPIC_PREFIX"] = prefix
    ensure_topics(AdminClient({**client_config(bootstrap), "logger": quiet_logger()}), ["cell-a"], 1, prefix=prefix)
    topics = topic_names(prefix)
    plane = ControlPlane(bootstrap, state / name)
    (state / name).mkdir(parents=True)
    plane.start_all()
    operator = Operator(bootstrap, topics)
    racks = -(-gangs // (8 * RACK))  # whole racks of 8-GPU nodes with a GPU for each single-GPU gang
    operator.cell(nodes=racks * RACK, racks=racks, quota=100_000)
    watcher = PlacedWatcher(bootstrap, topics)
    watcher.start()
    launcher = Producer({**client_config(bootstrap), "enable.idempotence": True, "acks": "all",
                         "linger.ms": 0, "logger": quiet_logger()})
    return topics, plane, operator, watcher, launcher


def submit(launcher: Producer, topics, codec: EventCodec, operator: Operator, job_id: str, direct: bool) -> None:
    """As `gangway submit` does: onto the team's input topic, which the intake takes into the cell's log (with
    `direct`, straight onto the log, as before there was an intake)."""
    envelope = operator.envelope(producer="launcher")
    event = job_submitted(job_id, "nlp", 1, 1, "H100", cell=envelope.cell, at=envelope.at, producer="launcher")
    if direct:
        launcher.produce(topics.events, key=b"cell-a", value=codec.encode(event), partition=0)
    else:
        launcher.produce(topics.input_topic(event), key=b"cell-a", value=codec.encode(event))
    launcher.poll(0)


def warm_up(launcher: Producer, topics, codec: EventCodec, operator: Operator, watcher: PlacedWatcher, name: str,
            direct: bool, rate: float, seconds: float) -> float:
    """Submits a few gangs and waits until they are placed (the team's input topic exists, the intake has found it
    and every service owns the cell), then submits at `rate` for `seconds` and waits until those are placed too:
    a cell that has been running. Returns the seconds the first few took."""
    began = time.perf_counter()
    jobs = [f"warm-{name}-{i}" for i in range(FIRST_GANGS)]
    for job in jobs:
        submit(launcher, topics, codec, operator, job, direct)
    launcher.flush(30)
    wait_placed(watcher, jobs)
    ready = time.perf_counter() - began
    steady = [f"warm-{name}-{FIRST_GANGS + i}" for i in range(int(rate * seconds))]
    submit_at(rate, steady, lambda job: submit(launcher, topics, codec, operator, job, direct))
    launcher.flush(30)
    wait_placed(watcher, steady)
    return ready


def submit_at(rate: float, jobs: list[str], send) -> None:
    """Calls `send` for each job, the i-th at i / rate seconds from now."""
    began = time.perf_counter()
    for i, job in enumerate(jobs):
        target = began + i / rate
        while time.perf_counter() < target:
            time.sleep(0.0005)
        send(job)


def print_timings(state: Path, name: str) -> None:
    """Each service's own account of where its time went (logged when it stops)."""
    for log in sorted((state / name).glob("*.log")):
        for line in log.read_text().splitlines():
            if " timings: " in line:
                print("   ", line.split("gangway.shell ")[1])


def wait_placed(watcher: PlacedWatcher, jobs: list[str], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not all(j in watcher.placed for j in jobs):
        time.sleep(0.05)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--burst", type=int, default=2000)
    parser.add_argument("--warm-up-s", type=float, default=1.0,
                        help="seconds of submissions at --rate, unmeasured, before each phase (0: from idle)")
    parser.add_argument("--bootstrap-servers", default=None)
    parser.add_argument("--brokers", type=int, choices=(1, 3), default=1,
                        help="the local cluster's size: 3 replicates every topic three times, min.insync.replicas 2")
    parser.add_argument("--direct", action="store_true",
                        help="write submissions straight onto the cell's log instead of the team's input topic")
    parser.add_argument("--unsigned", action="store_true",
                        help="no record signed or checked (events/signing.py): what signing costs, side by side")
    args = parser.parse_args()
    codec = EventCodec()
    with tempfile.TemporaryDirectory(prefix="gangway-bench-") as scratch:
        kafka = None
        bootstrap = args.bootstrap_servers
        if bootstrap is None:
            kafka = LocalKafka(data_dir=Path(scratch) / "kafka", nodes=args.brokers,
                               port=find_free_base_port(2 * args.brokers))
            bootstrap = kafka.start()
            use_admin_of(kafka)
            if args.unsigned:  # the admin's identity from the environment, with no key: nobody signs or checks
                os.environ.pop(SIGNING_KEY_ENV, None)
                os.environ.pop(WRITER_KEYS_ENV, None)
        try:
            warming = FIRST_GANGS + int(args.rate * args.warm_up_s)
            total = int(args.rate * args.seconds)
            topics, plane, operator, watcher, launcher = setup(bootstrap, Path(scratch), "latency", warming + total)
            ready = warm_up(launcher, topics, codec, operator, watcher, "latency", args.direct, args.rate,
                            args.warm_up_s)
            print(f"warm-up: the first {FIRST_GANGS} gangs placed {ready:.1f} s after their submission, then "
                  f"{args.warm_up_s:g} s at {args.rate:.0f}/s")
            sent: dict[str, float] = {}
            sent_wall: dict[str, float] = {}

            def send(job: str) -> None:
                sent[job], sent_wall[job] = time.perf_counter(), time.time()
                submit(launcher, topics, codec, operator, job, args.direct)

            submit_at(args.rate, [f"lat-{i}" for i in range(total)], send)
            launcher.flush(30)
            wait_placed(watcher, list(sent))
            latencies = sorted((watcher.placed[j] - sent[j]) * 1000 for j in sent if j in watcher.placed)
            watcher.stop = True
            plane.stop_all()
            p50, p99 = statistics.median(latencies), latencies[int(0.99 * (len(latencies) - 1))]
            print(f"phase 1: {total:,} gangs at {args.rate:.0f}/s: {len(latencies):,} placed; submit-to-placed "
                  f"p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {latencies[-1]:.1f} ms")
            placed_jobs = [j for j in sent if j in watcher.placed]
            for name, part in (("submit-to-decided", lambda j: watcher.decided[j] - sent_wall[j]),
                               ("  submit-to-logged (the intake's hop)", lambda j: watcher.logged[j] - sent_wall[j]),
                               ("  logged-to-decided (the admitter's)", lambda j: watcher.decided[j] - watcher.logged[j]),
                               ("decided-to-visible", lambda j: watcher.seen[j] - watcher.decided[j])):
                values = sorted(part(j) * 1000 for j in placed_jobs)
                print(f"   {name}: p50 {statistics.median(values):.1f} ms, "
                      f"p99 {values[int(0.99 * (len(values) - 1))]:.1f} ms")
            print_timings(Path(scratch), "latency")

            topics, plane, operator, watcher, launcher = setup(bootstrap, Path(scratch), "burst", warming + args.burst)
            warm_up(launcher, topics, codec, operator, watcher, "burst", args.direct, args.rate, args.warm_up_s)
            jobs = [f"burst-{i}" for i in range(args.burst)]
            began = time.perf_counter()
            for job in jobs:
                submit(launcher, topics, codec, operator, job, args.direct)
            launcher.flush(30)
            submitted = time.perf_counter() - began
            wait_placed(watcher, jobs)
            placed = [watcher.placed[j] for j in jobs if j in watcher.placed]
            watcher.stop = True
            plane.stop_all()
            elapsed = max(placed) - began
            print(f"phase 2: {args.burst:,} gangs submitted in {submitted:.2f} s; {len(placed):,} placed in "
                  f"{elapsed:.2f} s -> {len(placed) / elapsed:,.0f} gangs placed/s sustained")
            print_timings(Path(scratch), "burst")
        finally:
            if kafka is not None:
                kafka.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
