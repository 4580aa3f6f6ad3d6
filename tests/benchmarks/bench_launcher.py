"""Benchmark of launcher tools and real node agents: submit-to-first-worker-running latency with real
processes, and what the agent costs per worker.

The four services and the clock run as processes at event time = wall time, with two real node agents
(4 GPU slots each). Jobs of one worker (`sleep 0.3`) are submitted one after another through the SDK,
each once the previous one's worker has started, so the figure is the path a lone user sees:
`Client.submit` (read the log, check, write in a transaction) -> admitter -> placer -> agent -> process.
Latency is from just before `submit()` to the moment the agent's `WorkerStarted` (written right after
the process is spawned) is read back. Agent overhead: the agents' CPU time (from /proc) while the jobs
ran, less their idle rate measured first, per worker launched; and their resident memory.

    python3 tests/benchmarks/bench_launcher.py [--jobs 50] [--bootstrap-servers HOST:PORT]
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

from events.auth import client_config
from events.broker import LocalKafka, find_free_base_port, quiet_logger  # noqa: E402
from events.launcher.spec import parse_document  # noqa: E402
from events.topics import ensure_topics  # noqa: E402
from services.launcher import Client  # noqa: E402
from tests.integration.control_plane import ControlPlane  # noqa: E402
from tests.integration.launcher_cell import TEAMS  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--bootstrap-servers", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gangway-bench-launcher-") as scratch:
        scratch = Path(scratch)
        kafka = None
        bootstrap = args.bootstrap_servers
        if bootstrap is None:
            kafka = LocalKafka(data_dir=scratch / "kafka", port=find_free_base_port(2))
            bootstrap = kafka.start()
        prefix = f"bench-launcher-{uuid.uuid4().hex[:6]}."
        os.environ.update(GANGWAY_TOPIC_PREFIX=prefix, GANGWAY_EPOCH=repr(time.time()), GANGWAY_SPEEDUP="1")
        ensure_topics(AdminClient({**client_config(bootstrap), "logger": quiet_logger()}), ["cell-a"], 1,
                      prefix=prefix)
        plane = ControlPlane(bootstrap, scratch)
        try:
            plane.start_all()
            plane.command("clock", "run", "clock", "--tick-interval", "1")
            agents = ("a1", "a2")
            for node in agents:
                plane.command(f"agent-{node}", "agent", "--node", node, "--gpus", "4", "--gpu-type", "CPU",
                              "--rack", "r1", "--block", "b1", "--work-dir", str(scratch / node))
            client = Client(bootstrap)
            while len(client.nodes()) < len(agents):
                time.sleep(0.2)
            client.apply([TEAMS])
            time.sleep(3)  # services own the cell, agents settled
            pids = [plane.processes[f"agent-{n}"].pid for n in agents]
            idle_began, idle_cpu = time.monotonic(), sum(cpu_seconds(p) for p in pids)
            time.sleep(10)
            idle_rate = (sum(cpu_seconds(p) for p in pids) - idle_cpu) / (time.monotonic() - idle_began)

            latencies = []
            busy_began, busy_cpu = time.monotonic(), sum(cpu_seconds(p) for p in pids)
            for i in range(args.jobs):
                spec = parse_document({"kind": "Job", "metadata": {"name": f"lat-{i}", "team": "nlp"},
                                       "spec": {"workers": 1, "gpus_per_worker": 1, "gpu_type": "CPU",
                                                "command": ["sleep", "0.3"], "working_dir": str(scratch)}}, "bench")
                sent = time.time()
                job = client.submit(spec)
                client.wait(job, lambda s: bool(s.attempts and s.attempts[0]["workers"][0]["started_at"]), timeout=60)
                started = client.model.attempts[job][1].started[0]
                latencies.append(started - sent * 1000)
            for i in range(args.jobs):
                client.wait(f"lat-{i}", "ended", timeout=60)
            busy = time.monotonic() - busy_began
            busy_cpu = sum(cpu_seconds(p) for p in pids) - busy_cpu - idle_rate * busy
            ended = [client.get(f"lat-{i}").state for i in range(args.jobs)]
            memory = [rss_mb(p) for p in pids]
            client.close()
        finally:
            plane.stop_all()
            if kafka is not None:
                kafka.stop()
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
    print(f"{args.jobs} one-worker jobs, one at a time: submit-to-first-worker-running median "
          f"{statistics.median(latencies):.0f} ms, p99 {p99:.0f} ms, max {latencies[-1]:.0f} ms "
          f"({ended.count('succeeded')} succeeded)")
    print(f"agent overhead: idle {idle_rate * 1000 / len(pids):.1f} ms CPU per second per agent; "
          f"{busy_cpu * 1000 / args.jobs:.1f} ms CPU per worker launched, watched and reported "
          f"(above idle); resident memory {max(memory):.0f} MB per agent")
    return 0


if __name__ == "__main__":
    sys.exit(main())
