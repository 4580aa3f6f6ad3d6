"""Replay speed of the audit commands, per process, and where the time goes.

    python tests/benchmarks/bench_replay.py [--trace PATH] [--log FILE] [--runs N] [--against DIR] [--profile]
    python tests/benchmarks/bench_replay.py --cell CELL [--runs N]
    python tests/benchmarks/bench_replay.py --live-from FILE [--records N] [--batch B] [--runs N]

Makes a cell log by simulating an ITP trace (default cluster02 at 1.2x its demand: ~190,000 events; the sim's
own log, exactly what a cell on Kafka would hold for it), exports it, then times each step an audit takes:

- read: the exported Avro file decoded into event models (events/decoder.py's generated readers);
- fold: the state rebuilt from the log (`replay state`, `report`, `explain` without --why);
- timeline: `explain`'s fold with the job's lines;
- verify: one service's replica over the log (fold + decide on every event it answers), for each of the four.

Each figure is events per second of one process on this machine, inside the collector pacing the audit commands
use (events/collector.py). Then each audit command (`verify` for the admitter, the preemptor and all four at once)
runs as a process of its own on the exported file, timed from start to exit (interpreter start and imports included, with bytecode caches), `--runs` times, median. With
`--against DIR` (another checkout of Gangway, e.g. `git worktree add /tmp/before <commit>`) each process runs
alternately in both trees, side by side. `--profile` prints the functions that take the most time in read, fold
and verify.
"""

from __future__ import annotations

import argparse
import compileall
import cProfile
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from events import models as m  # noqa: E402
from events.collector import rare_collections  # noqa: E402
from events.logfile import read_log_file, write_log_file  # noqa: E402
from events.reader import default_bootstrap  # noqa: E402
from projections.cell import CellState  # noqa: E402
from projections.evolve import evolve  # noqa: E402
from replay.audit.timeline import timeline  # noqa: E402
from replay.sim.run import simulate  # noqa: E402
from replay.sim.workload import SimConfig, build_workload  # noqa: E402
from replay.source import read_cell, read_file  # noqa: E402
from replay.verify import verify  # noqa: E402
from services.deciders import DECIDERS  # noqa: E402
from services.policies import GANGWAY  # noqa: E402

DEFAULT_TRACE = ROOT.parent / "shared" / "traces" / "microsoft-itp-2021" / "cluster02.csv"


def simulated_log(trace: Path) -> list:
    """The log of a simulation of the trace, as its virtual cell writes it."""
    records: list = []
    config = SimConfig(gpus="1.2x", private=False)
    simulate(build_workload([trace], config), GANGWAY, config,
             observers=[lambda cell, event, offset: records.append((offset, event))])
    return records


def timed(label: str, events: int, step, profile: bool):
    profiler = cProfile.Profile() if profile else None
    start = time.perf_counter()
    if profiler:
        profiler.enable()
    result = step()
    if profiler:
        profiler.disable()
    seconds = time.perf_counter() - start
    print(f"{label:28} {events:>9,} events in {seconds:6.2f} s = {events / seconds:>9,.0f} events/s")
    if profiler:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(8)
    return result


def fold(records) -> CellState:
    state = CellState(tracks_rows=False)  # as `replay state` folds: no store saves it
    for offset, event in records:
        evolve(state, event, offset)
    return state


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--log", type=Path, help="an exported log to replay instead of simulating the trace")
    parser.add_argument("--runs", type=int, default=3, help="runs of each command as a process (median)")
    parser.add_argument("--against", type=Path, metavar="DIR", help="another checkout to time side by side")
    parser.add_argument("--cell", metavar="CELL", help="also read this live cell from Kafka (its broker and topic "
                        "prefix from $KAFKA_BOOTSTRAP_SERVERS and $GANGWAY_TOPIC_PREFIX), against its exported log")
    parser.add_argument("--live-from", type=Path, metavar="FILE", help="start a local broker, write the first "
                        "--records records of this exported log onto its cell as the admin, --batch records to a "
                        "signed transaction, then time reading it live against reading the same records from a file")
    parser.add_argument("--records", type=int, default=60_000)
    parser.add_argument("--batch", type=int, default=3, help="records per transaction (the demo's average is 2.7)")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    if args.cell:
        live_against_file(args.cell, args.runs)
        return
    if args.live_from:
        live_from_file(args.live_from, args.records, args.batch, args.runs, args.profile)
        return
    with tempfile.TemporaryDirectory() as folder:
        path = args.log
        if path is None:
            started = time.perf_counter()
            records = simulated_log(args.trace)
            path = Path(folder) / "cell.avro"
            write_log_file(path, "sim", records, f"sim {args.trace.name}")
            print(f"simulated {args.trace.name}: {len(records):,} events in {time.perf_counter() - started:.0f} s, "
                  f"exported to {path.stat().st_size / 1e6:.1f} MB")
        n = len(read_log_file(path).records)
        with rare_collections():
            in_process(path, n, args.profile)
        as_processes(path, n, args.runs, args.against)


def live_against_file(cell: str, runs: int) -> None:
    """A live cell's log against its export (`read_both_ways`)."""
    bootstrap = default_bootstrap()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "cell.avro"
        subprocess.run([sys.executable, "-m", "replay.cli", "log", "export", "--cell", cell, "--out", str(path),
                        "--bootstrap-servers", bootstrap], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        read_both_ways(cell, bootstrap, path, runs)


def live_from_file(source: Path, n: int, batch: int, runs: int, profile: bool) -> None:
    """A cell's log of a known size and batching on a broker of its own, against a file of the same records
    (`read_both_ways`)."""
    import os

    from events import signing
    from events.auth import admin_client
    from events.broker import LocalKafka, find_free_base_port
    from events.log import EventProducer
    from events.topics import ensure_topics, topic_names
    from tests.conftest import use_admin_of

    records = read_log_file(source).records[:n]
    cell = records[0][1].envelope.cell
    os.environ["GANGWAY_CELLS"] = cell
    with tempfile.TemporaryDirectory() as folder:
        kafka = LocalKafka(data_dir=Path(folder) / "kafka", nodes=1, port=find_free_base_port(2))
        bootstrap = kafka.start(timeout=150)
        try:
            use_admin_of(kafka)
            ensure_topics(admin_client(bootstrap), [cell], 1)
            writer = EventProducer(bootstrap, "bench-replay-fill", topic_names(), [cell], by_turns=True)
            events = [event for _, event in records]
            started = time.perf_counter()
            for i in range(0, len(events), batch):
                writer.write(events[i:i + batch])
            print(f"wrote {len(events):,} records of {source.name} onto cell {cell}, {batch} to a transaction, "
                  f"in {time.perf_counter() - started:.0f} s")
            path = Path(folder) / "cell.avro"
            write_log_file(path, cell, records, f"the first {len(records):,} records of {source.name}")
            read_both_ways(cell, bootstrap, path, runs)
            if profile:
                signing._signed_here.clear()
                with rare_collections():
                    timed("read live (profiled)", len(records), lambda: read_cell(cell, bootstrap), True)
        finally:
            kafka.stop()


def read_both_ways(cell: str, bootstrap: str, path: Path, runs: int) -> None:
    """The cell's log read live (records fetched, every batch's signature checked, decoded) and the same records
    read from `path`, alternating, in process; then `gangway replay state` both ways as a process, start to exit.
    Medians of `runs`."""
    from events import signing

    times: dict[str, list[float]] = {}
    n = 0
    last: dict[str, int] = {}  # each source's last offset: the live cell's count its transaction markers too
    with rare_collections():
        for _ in range(runs):
            for label, read in (("live (--cell)", lambda: read_cell(cell, bootstrap)),
                                ("exported (--log)", lambda: read_file(path))):
                signing._signed_here.clear()  # as a reader in another process: every signature is checked
                start = time.perf_counter()
                log = read()
                times.setdefault(f"read {label}", []).append(time.perf_counter() - start)
                n, last[label] = len(log.records), log.last_offset
    for _ in range(runs):
        for label, source in (("live (--cell)", ["--cell", cell, "--bootstrap-servers", bootstrap]),
                              ("exported (--log)", ["--log", str(path)])):
            start = time.perf_counter()  # the state at the source's last offset: every record read and folded
            subprocess.run([sys.executable, "-m", "replay.cli", "replay", "state", "--at", str(last[label]), *source],
                           cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
            times.setdefault(f"gangway replay state {label}", []).append(time.perf_counter() - start)
    for label, seconds in times.items():
        median = statistics.median(seconds)
        print(f"{label:42} {n:>9,} events in {median:6.2f} s = {n / median:>9,.0f} events/s "
              f"(median of {runs}: {', '.join(f'{s:.2f}' for s in seconds)})")


def in_process(path: Path, n: int, profile: bool) -> None:
    records = timed("read (decode)", n, lambda: read_log_file(path).records, profile)
    state = timed("fold (replay state)", n, lambda: fold(records), False)
    busiest = max(state.jobs.values(), key=lambda j: len(j.history)).job_id
    timed("explain (timeline fold)", n, lambda: timeline(records, busiest), False)
    for name in sorted(DECIDERS):
        verdict = timed(f"verify {name}", n, lambda name=name: verify(records, DECIDERS[name]()),
                        profile and name == "admitter")
        assert verdict.ok, verdict


def as_processes(path: Path, n: int, runs: int, against: Path | None) -> None:
    """Each audit command as a user runs it, start to exit, with the bytecode caches any run but the first finds
    (written here first: an environment with PYTHONDONTWRITEBYTECODE set would compile every module each run)."""
    trees = {"this": ROOT, **({"against": against.resolve()} if against else {})}
    for tree in trees.values():
        for package in ("events", "projections", "replay", "services"):
            compileall.compile_dir(tree / package, quiet=1)
    records = read_log_file(path).records
    last = records[-1][0]
    job = Counter(m.field_of(e, "job_id") for _, e in records if m.field_of(e, "job_id")).most_common(1)[0][0]
    commands = (["replay", "state", "--at", str(last)], ["explain", job], ["explain", job, "--why"], ["report"],
                ["verify", "--service", "admitter"], ["verify", "--service", "preemptor"], ["verify"])
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(runs):
        for words in commands:
            label = "gangway " + " ".join(word for word in words if word not in (job, str(last), "--at", "--service"))
            label += " (all four)" if words == ["verify"] else ""
            for name, tree in trees.items():  # alternating, so both meet the machine in the same state
                start = time.perf_counter()
                subprocess.run([sys.executable, "-m", "replay.cli", *words, "--log", str(path.resolve())], cwd=tree,
                               check=True, stdout=subprocess.DEVNULL)
                times.setdefault((label, name), []).append(time.perf_counter() - start)
    for (label, name), seconds in times.items():
        median = statistics.median(seconds)
        print(f"{label:28} {name:8} {n:>9,} events in {median:6.2f} s = {n / median:>9,.0f} events/s "
              f"(process, median of {runs}: {', '.join(f'{s:.2f}' for s in seconds)})")


if __name__ == "__main__":
    main()
