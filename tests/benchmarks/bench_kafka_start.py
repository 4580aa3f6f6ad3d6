"""Benchmark: cold and warm start of a 1-node local Kafka (median of N runs), so start-up cost stays visible.

    python3 tests/benchmarks/bench_kafka_start.py [--runs 3] [--empty-maven-repo]

cold = empty jar cache + fresh data dir: mvn copy + storage format + JVM start until the cluster answers.
       By default Maven's own ~/.m2 stays as it is; --empty-maven-repo also points Maven at an empty local
       repository, so the jars really come over the network from Maven Central.
warm = jar cache and formatted data present (a stop/start of the same cluster).
Not collected by pytest (the file name does not start with test_).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from events.broker import LocalKafka, ensure_jars, find_free_base_port  # noqa: E402


def timed(action) -> float:  # type: ignore[no-untyped-def]
    began = time.perf_counter()
    action()
    return time.perf_counter() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--empty-maven-repo", action="store_true", help="also start Maven from an empty local repository")
    args = parser.parse_args()

    fetch, cold, warm, stop = [], [], [], []
    with tempfile.TemporaryDirectory(prefix="gangway-bench-") as scratch:
        root = Path(scratch)
        last: LocalKafka | None = None
        for run in range(args.runs):
            cache = root / f"cache-{run}"
            if args.empty_maven_repo:
                os.environ["MAVEN_OPTS"] = f"-Dmaven.repo.local={root / f'm2-{run}'}"
            kafka = LocalKafka(data_dir=root / f"data-{run}", port=find_free_base_port(2), cache_root=cache)
            try:
                # start() would fetch the jars itself; fetching first only splits the figure in two.
                fetch_s = timed(lambda: ensure_jars(cache))
                start_s = timed(kafka.start)
            finally:
                stop.append(timed(kafka.stop))
            fetch.append(fetch_s)
            cold.append(fetch_s + start_s)
            print(f"cold run {run + 1}: {fetch_s + start_s:.1f} s (jar fetch {fetch_s:.1f} s)", flush=True)
            last = kafka
        assert last is not None
        for run in range(args.runs):
            try:
                warm.append(timed(last.start))
            finally:
                stop.append(timed(last.stop))
            print(f"warm run {run + 1}: {warm[-1]:.1f} s", flush=True)

    maven = "empty ~/.m2 (network download)" if args.empty_maven_repo else "warm ~/.m2"
    print(f"\n1-node local Kafka, median of {args.runs} runs, {os.cpu_count()} cores:")
    print(f"  cold start ({maven}): {statistics.median(cold):.1f} s  (of which jar fetch {statistics.median(fetch):.1f} s)")
    print(f"  warm start:  {statistics.median(warm):.1f} s")
    print(f"  stop:        {statistics.median(stop):.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
