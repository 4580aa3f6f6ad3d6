"""The chaos run (tests/integration/chaos.py) as a script: kill -9 services at random under a fleet and a trace
load for a while, optionally kill the leader broker of three, then check the whole committed log.

    python tests/benchmarks/bench_chaos.py [--seconds 240] [--speedup 10] [--brokers 1|3] [--seed 0]

Prints the kills, the log's size and every problem found; exits 1 when there is one.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from confluent_kafka.admin import AdminClient  # noqa: E402

from events.auth import client_config
from events.broker import LocalKafka, find_free_base_port, quiet_logger  # noqa: E402
from events.topics import ensure_topics, topic_names  # noqa: E402
from tests.conftest import use_admin_of  # noqa: E402
from tests.integration.chaos import Chaos, run  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=240.0, help="how long services are killed")
    parser.add_argument("--speedup", type=float, default=10.0, help="event time vs wall clock (1: real time)")
    parser.add_argument("--brokers", type=int, choices=(1, 3), default=1, help="3: also kill the leader broker once")
    parser.add_argument("--nodes", type=int, default=24)
    parser.add_argument("--jobs", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    prefix = f"chaos{os.getpid()}."
    os.environ["GANGWAY_TOPIC_PREFIX"] = prefix
    with tempfile.TemporaryDirectory(prefix="gangway-chaos-") as tmp:
        kafka = LocalKafka(data_dir=Path(tmp) / "kafka", nodes=args.brokers, port=find_free_base_port(2 * args.brokers))
        bootstrap = kafka.start(timeout=150)
        try:
            use_admin_of(kafka)  # SASL and ACLs are on: every client here is the broker's admin, as in the tests
            admin = AdminClient({**client_config(bootstrap), "logger": quiet_logger()})
            ensure_topics(admin, ["cell-a"], kafka.replication_factor, prefix=prefix)
            began = time.monotonic()
            report = run(kafka, bootstrap, topic_names(prefix), Path(tmp), Chaos(
                seconds=args.seconds, speedup=args.speedup, nodes=args.nodes, jobs=args.jobs,
                broker_kill=args.brokers == 3, seed=args.seed))
        finally:
            kafka.stop()
    print(f"chaos {args.seconds:.0f} s at speedup {args.speedup:g} on {args.brokers} broker(s), seed {args.seed}: "
          f"{time.monotonic() - began:.0f} s in all")
    print(f"kills: {dict(report.kills)}; broker kills: {report.broker_kills}")
    print(f"log: {report.events:,} events, {report.decisions:,} decisions, {report.jobs} jobs "
          f"({report.succeeded} succeeded), {report.node_failures} nodes failed for silence")
    for problem in report.problems:
        print(f"PROBLEM {problem}")
    print("every check held" if not report.problems else f"{len(report.problems)} problems")
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
