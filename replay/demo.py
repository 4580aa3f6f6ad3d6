"""`gangway demo`: the whole control plane on a local broker, shown live.

Starts (as separate processes) the four services and the clock, a simulated fleet of GPU nodes in
racks and blocks, and three teams replaying a busy 6-hour slice of the Microsoft ITP trace. Event
time runs `--speedup` (30) times faster than the wall clock, and the slice `--compress` (6) times
faster than that (gaps and durations alike, so the offered load keeps its shape): about two
minutes in all. Part way through, a team that lent its quota submits a gang
within its nominal (the preemptor reclaims the lent GPUs, asking the borrowers to checkpoint
first), and one busy node goes silent (recovery fails it and restarts its jobs from their last
checkpoint). The terminal shows the cell as it folds from the log; the run ends with a summary.
The read-model projector and the query API run too (`gangway api`): the dashboard's URL, with an
operator token in it, is printed at the start. Ctrl-C stops everything cleanly.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from events import models as m
from events.arguments import within
from events.auth import (
    OPERATOR,
    READER,
    SERVICES,
    AuthError,
    add_principals,
    admin_client,
    load_store,
    service_principal,
    team_principal,
)
from events.broker import KafkaSetupError, LocalKafka
from events.clock import VirtualClock
from events.log import InputWriter
from events.reader import LogReader
from events.submission import job_submitted
from events.topics import ensure_topics, topic_names
from events.traces import ITP
from projections.watch import CellView
from services.agent.failures import FIRST_BUSY
from services.policy import DEFAULT_POLICY

CELL = "cell-a"
TRACES = ("cluster03.csv", "cluster04.csv", "cluster07.csv")

ROOT = Path(__file__).resolve().parents[1]  # children run this checkout's code, wherever the demo started
#: Wall-clock seconds of heartbeat silence after which the demo's recovery fails a node. At event time x30 the
#: default 30 s timeout would be 1 s of wall time: a busy machine's stall of the fleet's process would fail every
#: node. The demo lengthens the timeout in event time to keep it this long (its policy version records that).
SILENCE_WALL_S = 3.0


def demo_policy(speedup: float) -> str:
    """The policy version the demo's services run: the default, with a heartbeat timeout of at least
    SILENCE_WALL_S of wall time."""
    default = DEFAULT_POLICY.recovery.heartbeat_timeout_ms
    timeout = max(default, round(SILENCE_WALL_S * 1000 * speedup))
    return DEFAULT_POLICY.version if timeout == default else (
        f"{DEFAULT_POLICY.version}+recovery.heartbeat_timeout_ms={timeout}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--duration", type=within(float, 0), default=120.0,
                        help="wall-clock seconds to run (default 120)")
    parser.add_argument("--speedup", type=within(float, 0, 30), default=30.0,
                        help="event time runs this many times faster (more than 0, at most 30; default 30)")
    parser.add_argument("--nodes", type=within(int, 1, low_included=True), default=40,
                        help="8-GPU nodes in the fleet (default 40: 320 GPUs)")
    parser.add_argument("--traces", type=Path, default=ITP, help="folder of the ITP cluster*.csv traces")
    parser.add_argument("--start", type=int, default=4_131_507,
                        help="seconds into the trace where the slice starts (default: a busy 6 h of three teams)")
    parser.add_argument("--jobs", type=within(int, 1, low_included=True), default=600,
                        help="at most this many jobs of the slice")
    parser.add_argument("--compress", type=within(float, 0), default=6.0,
                        help="the slice plays this many times faster than event time (gaps and durations)")
    parser.add_argument("--node-failure-at", type=within(float, 0, low_included=True), default=20.0, metavar="MINUTES",
                        help="event minutes after work starts on the first busy node that it goes silent (default 20)")
    parser.add_argument("--state-dir", type=Path, default=Path("~/.gangway/demo"))
    parser.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"),
                        help="an existing broker (default: start the local one)")
    parser.add_argument("--api-port", type=int, default=8080,
                        help="port of the dashboard and query API on 127.0.0.1 (default 8080; a free one if taken)")


def run(args: argparse.Namespace) -> int:
    kafka = None if args.bootstrap_servers else LocalKafka()
    started_kafka = kafka is not None and not kafka.status().up
    try:
        bootstrap = args.bootstrap_servers or kafka.start()
    except KafkaSetupError as error:
        print(f"gangway demo: {error}", file=sys.stderr)
        return 1
    run_id = time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:4]
    prefix = f"demo-{run_id}."
    state_dir = args.state_dir.expanduser() / run_id
    state_dir.mkdir(parents=True)
    epoch = time.time()
    env = dict(os.environ, GANGWAY_TOPIC_PREFIX=prefix, GANGWAY_EPOCH=repr(epoch), KAFKA_BOOTSTRAP_SERVERS=bootstrap,
               GANGWAY_CELLS=CELL)
    ensure_topics(admin_client(bootstrap), [CELL], 1, prefix=prefix)
    topics = topic_names(prefix)
    try:
        tokens = _principals(bootstrap, prefix)
    except AuthError as error:
        print(f"gangway demo: {error}", file=sys.stderr)
        return 1
    demo = Demo(args, bootstrap, topics, env, state_dir, VirtualClock.anchored(args.speedup, epoch), tokens)
    print(f"gangway demo: broker {bootstrap}, topics {prefix}*, logs in {state_dir}", flush=True)
    print(f"gangway demo: dashboard {demo.dashboard_url}", flush=True)
    try:
        demo.play()
        failed = demo.failed()
    finally:
        demo.stop()
        if started_kafka:
            kafka.stop()  # it was not running before the demo
    print(demo.view.render())
    print(demo.summary())
    if failed:
        print(f"gangway demo: failed: {failed}", file=sys.stderr)
        return 1
    return 0


class Demo:
    """The processes of one demo run and the live view of its cell."""

    def __init__(self, args: argparse.Namespace, bootstrap: str, topics, env: dict[str, str], state_dir: Path,
                 clock: VirtualClock, tokens: dict | None = None) -> None:
        self.args, self.bootstrap, self.topics, self.env, self.state_dir, self.clock = (
            args, bootstrap, topics, env, state_dir, clock)
        self.children: dict[str, subprocess.Popen] = {}
        self.view = CellView()
        self.submitted_at: dict[str, int] = {}
        self.first_placed: dict[str, int] = {}
        self.stopping = False
        self.reclaim: str | None = None
        self.live: Live | None = None
        self.api_port = _free_port(args.api_port)
        # On the local broker the API's tokens are the principals' (events/auth.py); elsewhere made up here.
        self.tokens = tokens or {"operator": secrets.token_urlsafe(16),
                                 "teams": {Path(t).stem: secrets.token_urlsafe(16) for t in TRACES}}
        self.operator_token = self.tokens["operator"]
        self.dashboard_url = f"http://127.0.0.1:{self.api_port}/#token={self.operator_token}"

    def start(self, name: str, *argv: str) -> None:
        log = open(self.state_dir / f"{name}.log", "wb")  # noqa: SIM115 - the child owns it
        self.children[name] = subprocess.Popen([sys.executable, "-m", "replay.cli", *argv], env=self.env,
                                               stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)

    def play(self) -> None:
        a = self.args
        previous = {sig: signal.signal(sig, self._stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        speed = ["--speedup", str(a.speedup)]
        tokens = self.state_dir / "api-tokens.yaml"
        tokens.write_text(f"operator: {self.operator_token}\nteams:\n"
                          + "".join(f"  {team}: {token}\n" for team, token in sorted(self.tokens["teams"].items())))
        self.start("api", "api", "--port", str(self.api_port), "--tokens", str(tokens), "--db",
                   str(self.state_dir / "readmodel"), "--cells", CELL, "--bootstrap-servers", self.bootstrap)
        self.start("services", "run", "all", *speed, "--tick-interval", "0.5", "--state-dir",
                   str(self.state_dir / "state"), "--policy", demo_policy(a.speedup), "-v")
        self.start("fleet", "fleet", "--nodes", str(a.nodes), "--nodes-per-rack", "4", "--racks-per-block", "4",
                   "--checkpoint-every", "5m", "--checkpoint-delay", "20s", *speed,
                   "--fail-node", FIRST_BUSY, "--fail-at", str(a.node_failure_at * 60))
        reader = LogReader([CELL], self.bootstrap, all_cells=[CELL], topics=self.topics)
        console = Console()
        if console.is_terminal:  # a live screen on a terminal; elsewhere a line every 10 s
            self.live = Live(console=console, auto_refresh=False, screen=True)
            self.live.start()
        began = time.monotonic()
        loaded = False
        last_screen = 0.0
        try:
            while not self.stopping and time.monotonic() - began < a.duration:
                for record in reader.follow(0.2):
                    if record.event is not None:
                        self._fold(record.offset, record.event)
                if not loaded and len(self.view.state.cluster.nodes) >= a.nodes:
                    loaded = True  # jobs go in once the nodes are there, so none is refused as too big
                    self.start("load", "load", *[f"--trace={a.traces / t}" for t in TRACES], *speed,
                               "--start", str(a.start), "--limit", str(a.jobs), "--max-gpus", "32",
                               "--compress", str(a.compress),
                               "--define-teams", "--gpus", str(a.nodes * 8))
                failed = self.failed()
                if failed:
                    print(f"gangway demo: {failed}; stopping", file=sys.stderr, flush=True)
                    break
                if self.reclaim is None and time.monotonic() - began > 0.4 * a.duration:
                    self._submit_reclaim()
                if time.monotonic() - last_screen >= 1.0:
                    self._show(time.monotonic() - began)
                    last_screen = time.monotonic()
        finally:
            reader.close()
            if self.live is not None:
                self.live.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def failed(self) -> str:
        """Which process ended on its own, and how, or '': every one runs until the demo stops it, but the load,
        which ends once it has written its slice (exit 0)."""
        for name, child in self.children.items():
            code = child.poll()
            if code is not None and (code != 0 or name != "load"):
                log = self.state_dir / f"{name}.log"
                last = next((line for line in reversed(log.read_text(errors="replace").splitlines())
                             if line.strip()), "") if log.exists() else ""
                return f"{name} exited with {code} ({log}{': ' + last[-300:] if last else ''})"
        return ""

    def _fold(self, offset: int, event: m.Event) -> None:
        self.view.fold(offset, event)
        if isinstance(event, m.JobSubmitted):
            self.submitted_at.setdefault(event.job_id, event.envelope.at)
        elif isinstance(event, m.JobPlaced):
            self.first_placed.setdefault(event.job_id, event.envelope.at)

    def _submit_reclaim(self) -> None:
        """A team with unused nominal quota, while another borrows, submits a gang within its nominal."""
        tenancy = self.view.state.tenancy
        room = {t: tenancy.quota(t, "H100").nominal - tenancy.used(t, "H100") for t in sorted(tenancy.teams)}
        borrowing = [t for t in sorted(tenancy.teams) if tenancy.borrowed(t, "H100") > 0]
        lender = max(sorted(room), key=lambda t: room[t], default=None)
        self.reclaim = ""
        if lender is None or not borrowing or room[lender] < 8:
            return
        workers = min(room[lender], 64) // 8
        self.reclaim = f"{lender}-reclaim"
        writer = InputWriter(self.bootstrap, self.topics, [CELL], self.env["GANGWAY_TOPIC_PREFIX"])
        writer.write([job_submitted(self.reclaim, lender, workers, 8, "H100", cell=CELL, at=self.clock.now_ms(),
                                      labels={"duration_ms": str(30 * 60_000)})])

    def _show(self, elapsed: float) -> None:
        header = Text(f"Gangway demo  {elapsed:5.0f}/{self.args.duration:.0f} s  (event time x{self.args.speedup:g})"
                      f"   Ctrl-C stops\ndashboard {self.dashboard_url}", style="bold")
        if self.live is not None:
            self.live.update(Group(header, self.view.renderable()), refresh=True)
        elif int(elapsed) % 10 == 0:
            state = self.view.state
            sys.stdout.write(f"[{elapsed:4.0f} s] offset {state.offset}, {len(state.jobs)} jobs, "
                             f"{len(state.queued)} queued, {len(state.holding)} holding GPUs\n")
        sys.stdout.flush()

    def _stop(self, *_: object) -> None:
        self.stopping = True

    def stop(self) -> None:
        for child in self.children.values():
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for name, child in self.children.items():
            try:
                child.wait(30)
            except subprocess.TimeoutExpired:
                child.kill()
                print(f"gangway demo: {name} did not stop in 30 s; killed", file=sys.stderr)

    def summary(self) -> str:
        decided = self.view.decided
        waits = sorted((self.first_placed[j] - self.submitted_at[j]) / 1000 for j in self.first_placed
                       if j in self.submitted_at)
        reclaimed = self.reclaim and self.reclaim in self.first_placed
        lines = [
            "",
            "summary",
            f"  jobs submitted {len(self.submitted_at)}, placed {len(self.first_placed)}, "
            f"succeeded {decided['JobSucceeded']}, rejected {decided['JobRejected']}",
            f"  queue wait (event time) median {waits[len(waits) // 2] if waits else 0:.0f} s, "
            f"max {waits[-1] if waits else 0:.0f} s",
            f"  preemptions requested {decided['PreemptionRequested']}, preempted {decided['JobPreempted']}"
            + (f"; reclaim gang {self.reclaim} {'placed' if reclaimed else 'still waiting'}" if self.reclaim else ""),
            f"  node failures {decided['NodeFailed']}, jobs interrupted {decided['JobInterrupted']}, "
            f"requeued {decided['JobRequeued']}, failed {decided['JobFailed']}",
            f"  processes' logs: {self.state_dir} (team tokens for the dashboard: api-tokens.yaml)",
        ]
        return "\n".join(lines)


def _principals(bootstrap: str, prefix: str) -> dict | None:
    """On the local broker with SASL: the demo's principals (services, the fleet, readers, the operator and its
    three teams) granted on its topics, and the API tokens of the operator and teams; None elsewhere."""
    store = load_store()
    if not store or set(store.get("bootstrap", "").split(",")) != set(bootstrap.split(",")):
        return None
    teams = [Path(t).stem for t in TRACES]
    names = [*map(service_principal, SERVICES), OPERATOR, READER, "fleet", *map(team_principal, teams)]
    entries = add_principals(bootstrap, names, topic_prefix=prefix, name_prefix=prefix)
    return {"operator": entries[OPERATOR]["token"], "teams": {t: entries[team_principal(t)]["token"] for t in teams}}


def _free_port(preferred: int) -> int:
    """`preferred` when nothing listens on it on 127.0.0.1, else a free port."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", preferred))
            return preferred
        except OSError:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]
