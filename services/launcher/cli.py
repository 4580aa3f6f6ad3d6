"""The launcher's `gangway` commands, a thin shell over the SDK (services/launcher/client.py):
submit, cancel, jobs, job, apply, teams, nodes, cordon, uncordon. Exit codes: 0 ok, 1 error, 2 usage."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

from confluent_kafka import KafkaException
from rich.live import Live
from rich.spinner import Spinner

from events.arguments import within
from events.auth import AuthError
from events.broker import unreachable
from events.command import Command, guarded
from events.launcher.spec import SpecError, load_documents
from projections.jobs import JobState
from services.launcher.client import Client, JobStatus, LauncherError
from services.launcher.output import FORMATS, age, console, emit, table_of

JOB_COLUMNS = (("JOB", lambda j: j.job_id), ("TEAM", lambda j: j.team), ("STATE", lambda j: j.state),
               ("GPUS", lambda j: j.gpus), ("SHAPE", lambda j: j.shape), ("REASON", lambda j: j.reason),
               ("QUEUE", lambda j: j.queue_position), ("START", lambda j: _in(j, j.estimated_start)),
               ("AGE", lambda j: age(j.age_s)))
TEAM_COLUMNS = (("TEAM", lambda t: t.team), ("COHORT", lambda t: t.cohort), ("GPU TYPE", lambda t: t.gpu_type),
                ("NOMINAL", lambda t: t.nominal), ("USED", lambda t: t.used), ("BORROWED", lambda t: t.borrowed),
                ("LENT", lambda t: t.lent), ("QUEUED", lambda t: t.queued), ("RUNNING", lambda t: t.running))
NODE_COLUMNS = (("BLOCK", lambda n: n.block), ("RACK", lambda n: n.rack), ("NODE", lambda n: n.node),
                ("TYPE", lambda n: n.gpu_type), ("GPUS", lambda n: n.gpus), ("USED", lambda n: n.used),
                ("FREE", lambda n: n.free), ("STATE", lambda n: n.state), ("JOBS", lambda n: ",".join(n.jobs) or None))


def _common(parser: argparse.ArgumentParser, output: bool = False) -> None:
    parser.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"))
    parser.add_argument("--cell", default=None, help="the cell (default: the first of $GANGWAY_CELLS)")
    if output:
        parser.add_argument("-o", "--output", choices=FORMATS, default="table", help="table (default), json or yaml")


def _client(args: argparse.Namespace) -> Client:
    problem = unreachable(args.bootstrap_servers)
    if problem:
        raise LauncherError(problem)
    return Client(args.bootstrap_servers, args.cell)


def _guarded(name: str, body: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Runs a command; a refused request or an unreachable broker is one line on stderr and exit 1."""
    return guarded(name, body, LauncherError, SpecError, AuthError, KafkaException, TimeoutError)


# --- submit ----------------------------------------------------------------------------------------


def _submit_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="YAML job documents (kind: Job)")
    parser.add_argument("--team", default=None, help="the team to charge (overrides metadata.team)")
    parser.add_argument("--job-id", default=None, help="the job's id (default: metadata.name); one job only")
    parser.add_argument("--request-id", default=None,
                        help="derive the job id from this request id, so retrying the same request is one job")
    parser.add_argument("--wait", action="store_true", help="follow the job until it ends; exit 1 unless it succeeds")
    parser.add_argument("--timeout", type=within(float, 0), default=None,
                        help="with --wait: give up after this many seconds")
    _common(parser)


def _submit(args: argparse.Namespace) -> int:
    for path in args.files:  # a document's own mistakes are told before any broker is asked
        load_documents(path, args.team)
    with _client(args) as client:
        known = set(client.refresh().submissions)
        ids = client.submit_all(args.files, team=args.team, job_id=args.job_id, request_id=args.request_id)
        for job_id in ids:
            print(f"job/{job_id} {'unchanged' if job_id in known else 'submitted'}")
        if not args.wait:
            return 0
        return min(1, sum(_follow(client, job_id, args.timeout) for job_id in ids))


def _follow(client: Client, job_id: str, timeout: float | None) -> int:
    """Shows the job's state as it changes until it ends; 0 if it succeeded."""
    out = console()
    line = lambda s: f"job/{s.job_id} {s.state} ({s.reason}){' ' + s.detail if s.detail else ''}"  # noqa: E731
    if out.is_terminal:
        spinner = Spinner("dots", text=f"job/{job_id}")
        with Live(spinner, console=out, refresh_per_second=8, transient=True):
            final = client.wait(job_id, timeout=timeout, on_change=lambda s: (
                spinner.update(text=line(s)), out.print(line(s))))
    else:
        final = client.wait(job_id, timeout=timeout, on_change=lambda s: print(line(s), flush=True))
    return 0 if final.state == JobState.SUCCEEDED else 1


# --- cancel, jobs, job -------------------------------------------------------------------------------


def _cancel_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("jobs", nargs="+", metavar="JOB")
    _common(parser)


def _cancel(args: argparse.Namespace) -> int:
    with _client(args) as client:
        for job_id in client.cancel(*args.jobs):
            print(f"job/{job_id} cancel requested")
    return 0


def _jobs_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--team", default=None)
    parser.add_argument("--state", action="append", default=[], choices=[s.value for s in JobState],
                        help="only jobs in this state (repeatable); ended states are shown when named")
    parser.add_argument("--all", action="store_true", help="ended jobs too (succeeded, failed, cancelled, rejected)")
    parser.add_argument("-w", "--watch", action="store_true",
                        help="keep the table live as the log moves (Ctrl-C stops)")
    _common(parser, output=True)


def _jobs(args: argparse.Namespace) -> int:
    with _client(args) as client:
        if not args.watch:
            emit(client.list(args.team, args.state, include_ended=args.all), args.output, JOB_COLUMNS)
            return 0
        out = console()
        table = lambda: table_of(client.list(args.team, args.state, include_ended=args.all), JOB_COLUMNS)  # noqa: E731
        with Live(table(), console=out, auto_refresh=False) as live:
            try:
                while True:
                    client.follow(1.0)
                    live.update(table(), refresh=True)
            except KeyboardInterrupt:
                return 0


def _job_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", metavar="JOB")
    _common(parser, output=True)


def _job(args: argparse.Namespace) -> int:
    with _client(args) as client:
        status = client.get(args.job)
    if args.output != "table":
        emit([status], args.output, ())
        return 0
    _describe(status)
    return 0


def _in(s: JobStatus, at: int | None) -> str | None:
    """An event time as how long from now (the status's own clock): 'in 2h5m'; None without one."""
    if at is None:
        return None
    return f"in {age(max(0, at - (s.submitted_at + s.age_s * 1000)) / 1000)}"


def _describe(s: JobStatus) -> None:
    out = console()
    spec = s.spec
    out.print(f"[bold]job/{s.job_id}[/]  team {s.team}  {s.shape} ({s.gpus} GPUs)  attempt {s.attempt}, "
              f"restarts {s.restarts}")
    out.print(f"state      {s.state} ({s.reason}){'  ' + s.detail if s.detail else ''}")
    if s.queue_position:
        start = "unknown" if s.estimated_start is None else _in(s, s.estimated_start)
        if s.earliest_start is not None and s.latest_start is not None and s.earliest_start < s.latest_start:
            start += f" (between {_in(s, s.earliest_start)} and {_in(s, s.latest_start)})"
        out.print(f"queue      position {s.queue_position} in the cell, {s.team_position} in team {s.team}; "
                  f"estimated start {start} ({s.start_basis})")
    if spec:
        out.print(f"command    {' '.join(spec['command']) or '-'}")
        out.print(f"priority   {spec['priority_class'] or 'default'}   time limit "
                  f"{spec['time_limit_ms'] // 1000 if spec['time_limit_ms'] else '-'} s   "
                  f"restart budget {spec['max_restarts']}")
        step = s.checkpoint_step if s.checkpoint_step is not None else "-"
        out.print(f"checkpoint {spec['checkpoint_dir'] or '-'} (latest step {step})")
    rows = [{"attempt": a["attempt"], "worker": w["worker"], "node": w["node"], "gpus": ",".join(map(str, w["gpus"])),
             "exit": w["exit_code"], "resumed from": a["resumed_from_step"], "outcome": a["outcome"]}
            for a in s.attempts for w in a["workers"]]
    emit(rows, "table", [(k.upper(), lambda r, k=k: r[k]) for k in ("attempt", "worker", "node", "gpus", "exit",
                                                                      "resumed from", "outcome")],
         title="attempts", out=out)


# --- apply, teams, nodes, cordon -----------------------------------------------------------------------


def _apply_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="YAML documents: kind Team, Cohort or PriorityClass")
    _common(parser)


def _apply(args: argparse.Namespace) -> int:
    with _client(args) as client:
        for name, outcome in client.apply(args.files):
            print(f"{name} {outcome}")
    return 0


def _listing_arguments(parser: argparse.ArgumentParser) -> None:
    _common(parser, output=True)


def _listing(rows: Callable[[Client], list], columns: tuple) -> Callable[[argparse.Namespace], int]:
    """A command that prints one of the client's listings (teams, nodes) as a table, JSON or YAML."""
    def run(args: argparse.Namespace) -> int:
        with _client(args) as client:
            emit(rows(client), args.output, columns)
        return 0
    return run


def _cordon_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("node", metavar="NODE")
    parser.add_argument("--reason", default="", help="recorded with the cordon")
    _common(parser)


def _cordon_command(cordon: bool) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        with _client(args) as client:
            client.cordon(args.node, cordon, args.reason)
        print(f"node/{args.node} {'cordoned' if cordon else 'uncordoned'}")
        return 0
    return run


#: The subcommands this module runs, by name; their help is in the dispatcher (replay/cli.py).
COMMANDS: dict[str, Command] = {
    "submit": Command(_submit_arguments, _guarded("submit", _submit),
                      "gangway submit examples/train.yaml --team vision --wait"),
    "cancel": Command(_cancel_arguments, _guarded("cancel", _cancel), "gangway cancel train-mlp"),
    "jobs": Command(_jobs_arguments, _guarded("jobs", _jobs), "gangway jobs --team vision --state queued -o json"),
    "job": Command(_job_arguments, _guarded("job", _job), "gangway job train-mlp -o yaml"),
    "apply": Command(_apply_arguments, _guarded("apply", _apply), "gangway apply examples/teams.yaml"),
    "teams": Command(_listing_arguments, _guarded("teams", _listing(Client.teams, TEAM_COLUMNS)),
                     "gangway teams -o json"),
    "nodes": Command(_listing_arguments, _guarded("nodes", _listing(Client.nodes, NODE_COLUMNS)), "gangway nodes"),
    "cordon": Command(_cordon_arguments, _guarded("cordon", _cordon_command(True)),
                      "gangway cordon node-3 --reason 'fan noise'"),
    "uncordon": Command(_cordon_arguments, _guarded("uncordon", _cordon_command(False)), "gangway uncordon node-3"),
}
