"""A real node agent: registers its node, heartbeats, and runs each placed worker as an OS process.

`NodeAgent` folds the cell's log into the launcher read model (projections/read_model.py) and, after
every batch, reconciles the processes on its node with what the log says should run there:
- a worker of a placed or running attempt on this node that has not started is launched, with the
  environment a distributed trainer expects (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT,
  CUDA_VISIBLE_DEVICES, GANGWAY_*), stdout and stderr to files in its directory;
- a worker whose attempt no longer holds the node (preempted, cancelled, interrupted, failed) is
  stopped: SIGTERM to its process group, SIGKILL after the grace;
- a preempting job's workers get the checkpoint signal (SIGUSR1 by default) once.
Every exit becomes `WorkerExited` with its code, and every checkpoint the job reports (rank 0 appends
a JSON line `{"step": N}` to $GANGWAY_CHECKPOINT_REPORT) becomes `CheckpointCompleted` with the step.
A preempted job's workers are stopped only once the preemptor has said `JobPreempted` (after the
checkpoint, or at the deadline), so their exits never read as a crash of the attempt that is running.

Workers outlive the agent. Each runs under a tiny `sh` that records its exit status in a file, and
its pid (with the process's start time, against pid reuse) is written beside it; an agent restarted
on the same node re-registers, adopts the workers that should still run, stops the others, reports
the exits it missed (a worker gone without a status is reported with EXIT_LOST), and starts nothing
twice. See docs/launcher.md for the checkpoint protocol.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from events import models as m
from events.launcher.spec import NAME
from projections.jobs import JobState
from projections.read_model import ReadModel
from services.agent.gpu_health import GpuHealth

EXIT_LOST = -1  # a worker that vanished while the agent was down, leaving no exit status
TOPOLOGY = ["block", "rack"]
#: Runs the worker, keeps the sh alive through the signals meant for the worker, and records its status.
SHIM = ('trap : USR1 USR2 TERM INT HUP QUIT; "$@"; code=$?; '
        'echo $code > "$GANGWAY_EXIT_FILE.tmp" && mv "$GANGWAY_EXIT_FILE.tmp" "$GANGWAY_EXIT_FILE"; exit $code')
RUNS_HERE = (JobState.PLACED, JobState.RUNNING, JobState.PREEMPTING)


@dataclass(frozen=True)
class AgentConfig:
    node: str
    gpus: int
    gpu_type: str
    rack: str
    block: str
    work_dir: Path
    address: str = "127.0.0.1"
    checkpoint_signal: int = signal.SIGUSR1
    stop_grace_s: float = 10.0
    heartbeat_every_s: float = 2.0
    health_every_s: float = 30.0
    #: A gang's rendezvous port is drawn from [port_base, port_base + port_span): below Linux's ephemeral ports
    #: (32768-60999 by default), so the node's outgoing connections do not hold it (another listener still may,
    #: and an attempt that finds its port taken fails, and the next attempt draws another).
    port_base: int = 20_000
    port_span: int = 12_000


@dataclass
class Worker:
    """One worker process of one attempt on this node."""

    job_id: str
    attempt: int
    worker: int
    directory: Path
    pid: int
    started_ticks: str  # the process's start time in /proc, so a reused pid is not mistaken for it
    launched_at: int  # event time it was launched (or adopted)
    restored_ms: int = 0  # training time of the checkpoint it resumed from
    rank: int = 0
    popen: subprocess.Popen | None = None  # None when adopted from an earlier agent
    stop_sent_at: float | None = None  # monotonic time SIGTERM was sent
    killed: bool = False
    exit_code: int | None = None
    report_offset: int = 0

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.job_id, self.attempt, self.worker)


@dataclass
class NodeAgent:
    """The agent's logic; the loop around it (services/agent/agent_cli.py) reads the log and writes `drain()`."""

    config: AgentConfig
    cell: str
    model: ReadModel = field(default_factory=ReadModel)
    workers: dict[tuple[str, int, int], Worker] = field(default_factory=dict)
    signalled: set[tuple[str, int]] = field(default_factory=set)  # (job, attempt) asked to checkpoint
    outbox: list[tuple[m.Event, bool]] = field(default_factory=list)
    heartbeat_seq: int = 0
    last_heartbeat: float = 0.0
    last_health: float = 0.0
    health: GpuHealth = field(default_factory=GpuHealth)

    @property
    def node(self) -> str:
        return self.config.node

    # --- the log -----------------------------------------------------------------------------------

    def observe(self, offset: int, event: m.Event, now: int, live: bool = True) -> None:
        self.model.fold(offset, event)
        if live and isinstance(event, m.NodeFailed) and event.node == self.node:
            # Declared dead while alive (a slow heartbeat): its jobs were interrupted; the node is fine.
            self._emit(m.NodeHealthCheckPassed(envelope=self._envelope(now, f"health-{offset}"), node=self.node))

    def start(self, now: int) -> None:
        """After catching up with the log: register (again), pass health checks if recovery failed the node,
        and adopt or reap the worker processes an earlier agent left."""
        state = self.model.state
        if not state.cluster.levels:
            self._emit(m.CellConfigured(envelope=self._envelope(now, f"configure-{now}"), topology_levels=TOPOLOGY))
        c = self.config
        self._emit(m.NodeRegistered(envelope=self._envelope(now, f"register-{now}"), node=c.node, gpu_type=c.gpu_type,
                                    gpus=c.gpus, labels={"block": c.block, "rack": c.rack}, address=c.address))
        node = state.cluster.nodes.get(c.node)
        if node is not None and (node.failed or node.fault_cordoned):
            self._emit(m.NodeHealthCheckPassed(envelope=self._envelope(now, f"health-{now}"), node=c.node))
        self._adopt(now)

    def step(self, now: int) -> None:
        """One round: reconcile processes with the log, collect exits and checkpoints, heartbeat, check GPUs."""
        self._reconcile(now)
        self.collect(now)
        wall = time.monotonic()
        if wall - self.last_heartbeat >= self.config.heartbeat_every_s:
            self.last_heartbeat = wall
            self.heartbeat_seq += 1
            self._emit(m.NodeHeartbeat(envelope=self._envelope(now, f"hb-{self.heartbeat_seq}-{now}"), node=self.node,
                                       seq=self.heartbeat_seq), heartbeat=True)
        if self.health.available and wall - self.last_health >= self.config.health_every_s:
            self.last_health = wall
            for gpu, xid, message in self.health.poll():
                self._emit(m.GpuErrorReported(envelope=self._envelope(now, f"xid-{xid}-gpu{gpu}-{now}"), node=self.node,
                                              gpu=gpu, xid=xid, message=message))

    def drain(self) -> list[tuple[m.Event, bool]]:
        out, self.outbox = self.outbox, []
        return out

    def put_back(self, events: list[tuple[m.Event, bool]]) -> None:
        """Events drained but not written (the broker did not take them): first in the next drain, in order."""
        self.outbox[:0] = events

    def stop_all(self) -> None:
        """Stops every worker on this node (SIGTERM, then SIGKILL after the grace), for --drain-on-exit."""
        for w in self._live():
            self._terminate(w)

    def live_workers(self) -> int:
        return len(self._live())

    # --- reconciling --------------------------------------------------------------------------------

    def _wanted(self) -> dict[tuple[str, int, int], tuple[int, int, tuple[int, ...], int]]:
        """Workers the log says run on this node now: key -> (rank, world size, GPU indices, local rank)."""
        out = {}
        state = self.model.state
        for job_id in sorted(state.holding):
            job = state.jobs[job_id]
            if job.state not in RUNS_HERE:
                continue
            gang = sorted(job.assignments)
            mine = [a for a in gang if a[1] == self.node]
            for local, (worker, _, gpus) in enumerate(mine):
                out[(job_id, job.attempt, worker)] = (gang.index((worker, self.node, gpus)), len(gang), gpus, local)
        return out

    def _reconcile(self, now: int) -> None:
        wanted = self._wanted()
        state = self.model.state
        for key, (rank, world, gpus, local) in wanted.items():
            job = state.jobs[key[0]]
            run = self.model.current_attempt(job)
            if key in self.workers:
                continue
            if run is not None and key[2] in run.started:  # the log says it started, yet no process is known here
                self._report_lost(key, now)
            elif job.state is not JobState.PREEMPTING:
                self._launch(key, rank, world, gpus, local, now)
        for w in self._live():
            if w.key not in wanted and w.stop_sent_at is None:
                self._terminate(w)
        for (job_id, attempt, _), w in list(self.workers.items()):
            job = state.jobs.get(job_id)
            if (job is not None and job.state is JobState.PREEMPTING and job.attempt == attempt
                    and (job_id, attempt) not in self.signalled and w.exit_code is None):
                self.signalled.add((job_id, attempt))
                self._signal_job(job_id, attempt, self.config.checkpoint_signal)
        self._forget_finished(wanted)

    def _signal_job(self, job_id: str, attempt: int, signum: int) -> None:
        for w in self._live():
            if (w.job_id, w.attempt) == (job_id, attempt):
                _killpg(w.pid, signum)

    def _terminate(self, w: Worker) -> None:
        w.stop_sent_at = time.monotonic()
        _killpg(w.pid, signal.SIGTERM)

    def _forget_finished(self, wanted: dict) -> None:
        """Drops records of exited workers once their attempt is over (their exits are in the log)."""
        for key, w in list(self.workers.items()):
            if w.exit_code is not None and key not in wanted:
                del self.workers[key]

    # --- processes ----------------------------------------------------------------------------------

    def _launch(self, key: tuple[str, int, int], rank: int, world: int, gpus: tuple[int, ...], local: int,
                now: int) -> None:
        job_id, attempt, index = key
        job = self.model.state.jobs[job_id]
        spec = self.model.submissions.get(job_id)
        directory = self._worker_dir(key)
        directory.mkdir(parents=True, exist_ok=True)
        for stale in ("exit", "exit.tmp", "pid"):
            (directory / stale).unlink(missing_ok=True)
        command = list(spec.command) if spec is not None and spec.command else []
        if not command:  # nothing to run: the worker fails at once, visibly, and recovery decides
            command = ["sh", "-c", "echo 'gangway: this job has no command to run' >&2; exit 127"]
        resume = self.model.checkpoint_step(job)
        gang = sorted(job.assignments)
        master_node = gang[0][1]
        env = {
            **os.environ, **(spec.env if spec else {}),
            "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(local),
            "LOCAL_WORLD_SIZE": str(sum(1 for a in gang if a[1] == self.node)),
            "MASTER_ADDR": self.model.addresses.get(master_node, "127.0.0.1"),
            "MASTER_PORT": str(self._master_port(job_id, attempt)),
            "CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus)),
            "GANGWAY_JOB_ID": job_id, "GANGWAY_ATTEMPT": str(attempt), "GANGWAY_WORKER": str(index),
            "GANGWAY_NODE": self.node, "GANGWAY_CHECKPOINT_DIR": (spec.checkpoint_dir or "") if spec else "",
            "GANGWAY_RESUME_STEP": str(resume or 0),
            "GANGWAY_CHECKPOINT_REPORT": str(directory / "checkpoints.jsonl"),
            "GANGWAY_EXIT_FILE": str(directory / "exit"),
        }
        cwd = spec.working_dir if spec is not None and spec.working_dir else str(directory)
        with open(directory / "stdout.log", "ab") as out, open(directory / "stderr.log", "ab") as err:
            try:
                popen = subprocess.Popen(["/bin/sh", "-c", SHIM, "gangway-worker", *command], cwd=cwd, env=env,
                                         stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True)
            except OSError as error:  # e.g. the working directory does not exist
                err.write(f"gangway: cannot start the worker: {error}\n".encode())
                self._exited_without_process(key, directory, now, 127)
                return
        restored = job.checkpoint.progress_ms if job.checkpoint else 0
        w = Worker(job_id, attempt, index, directory, popen.pid, _start_ticks(popen.pid), now, restored, rank, popen)
        (directory / "pid").write_text(json.dumps({"pid": w.pid, "start": w.started_ticks, "rank": rank,
                                                   "launched_at": now, "restored_ms": restored, "job_id": job_id}))
        self.workers[key] = w
        self._started(key, now)

    def _worker_dir(self, key: tuple[str, int, int]) -> Path:
        """A worker's directory under the work directory: `jobs/<job id>/a<attempt>/w<worker>`. A job id that is not
        one plain name (letters, digits, '.', '_', '-': the launcher writes no other, a foreign writer might) is
        named by its digest instead, so that no id reaches outside the work directory."""
        job_id, attempt, index = key
        name = job_id if NAME.fullmatch(job_id) else "id-" + hashlib.sha256(job_id.encode()).hexdigest()[:32]
        return self.config.work_dir / "jobs" / name / f"a{attempt}" / f"w{index}"

    def _master_port(self, job_id: str, attempt: int) -> int:
        """The same on every node of the gang, and another for each attempt (a port left in use fails one attempt)."""
        return self.config.port_base + zlib.crc32(f"{job_id}/{attempt}".encode()) % self.config.port_span

    def _exited_without_process(self, key: tuple[str, int, int], directory: Path, now: int, code: int) -> None:
        job_id, attempt, index = key
        self.workers[key] = Worker(job_id, attempt, index, directory, 0, "", now, exit_code=code)
        self._started(key, now)
        self._exit(self.workers[key], code, now)

    def _report_lost(self, key: tuple[str, int, int], now: int) -> None:
        job_id, attempt, index = key
        directory = self._worker_dir(key)
        self.workers[key] = w = Worker(job_id, attempt, index, directory, 0, "", now)
        code = _read_exit(directory)
        self._exit(w, EXIT_LOST if code is None else code, now)

    def _adopt(self, now: int) -> None:
        """Takes over the worker processes an earlier agent on this node started (see the module docstring)."""
        root = self.config.work_dir / "jobs"
        reported = {(j, a, w) for j, runs in self.model.attempts.items() for a, run in runs.items() for w in run.exits}
        for pid_file in sorted(root.glob("*/a*/w*/pid")) if root.exists() else []:
            directory = pid_file.parent
            info = json.loads(pid_file.read_text())
            key = (info.get("job_id", directory.parent.parent.name), int(directory.parent.name[1:]),
                   int(directory.name[1:]))
            if key in reported:
                continue
            w = Worker(*key, directory, info["pid"], info["start"], info.get("launched_at", now),
                       info.get("restored_ms", 0), info.get("rank", 0))
            w.report_offset = _size(directory / "checkpoints.jsonl")  # checkpoints reported before are old news
            self.workers[key] = w
            run = self.model.attempts.get(key[0], {}).get(key[1])
            if run is None or key[2] not in run.started:  # the earlier agent died before it could say so
                self._started(key, now)
            if not self._alive(w):
                code = _read_exit(directory)
                self._exit(w, EXIT_LOST if code is None else code, now)

    def _live(self) -> list[Worker]:
        return [w for w in self.workers.values() if w.exit_code is None and w.pid]

    def _alive(self, w: Worker) -> bool:
        if w.popen is not None:
            return w.popen.poll() is None
        return _start_ticks(w.pid) == w.started_ticks  # adopted: the same process is still there (not a zombie)

    def collect(self, now: int) -> None:
        """Reports the checkpoints and exits of this node's workers; kills those past their stop grace."""
        for w in self._live():
            self._checkpoints(w, now)
            if not self._alive(w):
                code = _read_exit(w.directory)
                if code is None:
                    code = w.popen.returncode if w.popen is not None else EXIT_LOST
                self._exit(w, code, now)
            elif (w.stop_sent_at is not None and not w.killed
                  and time.monotonic() - w.stop_sent_at > self.config.stop_grace_s):
                w.killed = True
                _killpg(w.pid, signal.SIGKILL)

    def _checkpoints(self, w: Worker, now: int) -> None:
        """Rank 0's new checkpoint reports, as CheckpointCompleted for its attempt while that attempt holds the node."""
        if w.rank != 0:
            return
        path = w.directory / "checkpoints.jsonl"
        if _size(path) <= w.report_offset:
            return
        with open(path, "rb") as f:
            f.seek(w.report_offset)
            data = f.read()
        complete = data[:data.rfind(b"\n") + 1]  # a line still being written waits for the next round
        w.report_offset += len(complete)
        job = self.model.state.jobs.get(w.job_id)
        for line in complete.splitlines():
            try:
                step = int(json.loads(line)["step"])
            except (ValueError, KeyError, TypeError):
                continue  # not a report: ignored (the protocol is one JSON object per line)
            if job is None or job.attempt != w.attempt or not job.holds_capacity:
                continue
            self._emit(m.CheckpointCompleted(
                envelope=self._envelope(now, f"{w.job_id}/a{w.attempt}/checkpoint-{step}", w.job_id),
                job_id=w.job_id, attempt=w.attempt, checkpoint_id=f"{w.job_id}/a{w.attempt}/step-{step}",
                progress_ms=w.restored_ms + max(0, now - w.launched_at), step=step))

    def _started(self, key: tuple[str, int, int], now: int) -> None:
        job_id, attempt, index = key
        self._emit(m.WorkerStarted(envelope=self._envelope(now, f"{job_id}/a{attempt}/w{index}/started", job_id),
                                   job_id=job_id, attempt=attempt, worker=index, node=self.node))

    def _exit(self, w: Worker, code: int, now: int) -> None:
        w.exit_code = code
        self._emit(m.WorkerExited(envelope=self._envelope(now, f"{w.job_id}/a{w.attempt}/w{w.worker}/exited", w.job_id),
                                  job_id=w.job_id, attempt=w.attempt, worker=w.worker, node=self.node, exit_code=code))

    # --- output -------------------------------------------------------------------------------------

    def _emit(self, event: m.Event, heartbeat: bool = False) -> None:
        self.outbox.append((event, heartbeat))

    def _envelope(self, at: int, what: str, job_id: str | None = None) -> m.Envelope:
        producer = f"agent/{self.node}"
        return m.Envelope(event_id=f"{producer}/{what}", cell=self.cell, at=at, producer=producer,
                          correlation_id=job_id)


def _killpg(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass  # already gone


def _start_ticks(pid: int) -> str:
    """Field 22 of /proc/<pid>/stat (start time); '' when the process is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    fields = stat[stat.rfind(")") + 2:].split()
    return "" if fields[0] == "Z" else fields[19]


def _read_exit(directory: Path) -> int | None:
    try:
        return int((directory / "exit").read_text().strip())
    except (OSError, ValueError):
        return None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
