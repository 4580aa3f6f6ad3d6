"""The `gangway` command: one thin dispatcher over every subcommand, so it lives in the top layer.

Only the chosen subcommand's module is imported (the others' imports took about half a second of every command's
start); `gangway --help` lists them all from the table below without importing any.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Any

from events.auth import AuthError

# Each: name, help, and where its `add_arguments(parser)` and `run(args) -> int` are (and maybe an `example`): a
# module, or `module:NAME` for the command NAME of the module's COMMANDS.
SUBCOMMANDS: tuple[tuple[str, str, str], ...] = (
    ("demo", "the whole system on a local broker: services, a simulated fleet, teams replaying a trace, shown live",
     "replay.demo"),
    ("kafka", "start, stop or inspect the local Apache Kafka broker (no Docker needed)", "events.broker_cli"),
    ("principal", "create Kafka principals (teams' launchers, agents, services, readers) and print their secrets",
     "events.principal_cli"),
    ("topics", "create Gangway's topics and print the topic catalogue", "events.topics_cli"),
    ("schemas", "list, check, write and release the Avro event schemas", "events.schemas_cli"),
    ("run", "run a service (admitter, placer, preemptor, recovery), the clock, or all of them on Kafka",
     "services.run_cli"),
    ("watch", "live terminal view of a cell: GPUs and queues per team, latest decisions", "projections.watch"),
    ("projection", "rebuild a cell's projection from its log, or compare two projections", "replay.rebuild"),
    ("fleet", "run a simulated fleet of GPU nodes (node agents) on Kafka, with failure injection",
     "services.agent.fleet_cli"),
    ("load", "submit jobs from ITP / Philly traces at their (compressed) submission times", "events.load_cli"),
    ("verify", "re-run each service over a cell's log and check it reproduces every decision it wrote",
     "replay.verify"),
    ("scenario", "run scenario files in virtual time and check their expectations", "replay.scenario.cli"),
    ("log", "export a cell's log to a portable Avro file that every audit command reads with --log",
     "replay.log_cli"),
    ("explain", "a job's whole timeline from the log; --why re-runs the deciders to show what binds, with numbers",
     "replay.audit.cli:explain"),
    ("replay", "the cell as it was at an offset or time: nodes by domain, jobs by state, quota use per team",
     "replay.audit.cli:replay"),
    ("whatif", "re-drive a recorded log's inputs through another policy and compare the outcomes",
     "replay.audit.cli:whatif"),
    ("report", "the fair-share ledger per team: GPU-hours used, borrowed, lent; preemptions; wait percentiles",
     "replay.audit.cli:report"),
    ("api", "the read-model query API (HTTP JSON, OpenAPI) and the live dashboard, with its projector",
     "replay.api.cli"),
    ("sim", "replay job traces in virtual time under a policy (or compare policies) and measure", "replay.sim.cli"),
    ("submit", "submit jobs from YAML files (kind: Job); --wait follows them to the end",
     "services.launcher.cli:submit"),
    ("cancel", "cancel jobs, wherever they are (queued, running, checkpointing)", "services.launcher.cli:cancel"),
    ("jobs", "list jobs: team, state, GPUs, shape, reason, queue position, age", "services.launcher.cli:jobs"),
    ("job", "one job: spec, state, placement, attempts", "services.launcher.cli:job"),
    ("apply", "define teams, cohorts, quotas and priority classes from YAML files", "services.launcher.cli:apply"),
    ("teams", "quota per team and GPU type: nominal, used, borrowed, lent", "services.launcher.cli:teams"),
    ("nodes", "nodes by block and rack: GPUs used and free, state, jobs", "services.launcher.cli:nodes"),
    ("cordon", "stop placing new work on a node (running work stays)", "services.launcher.cli:cordon"),
    ("uncordon", "let a cordoned node take work again", "services.launcher.cli:uncordon"),
    ("trace", "print a job's trace: the span tree from submission through every decision to the agents",
     "events.trace_cli"),
    ("agent", "run a node agent: register a node, heartbeat, run its placed workers as real processes",
     "services.agent.agent_cli"),
)


def command_of(where: str) -> Any:
    """The module or command object at `where` (see SUBCOMMANDS), imported now."""
    module, _, name = where.partition(":")
    loaded = importlib.import_module(module)
    return loaded.COMMANDS[name] if name else loaded


def build_parser(chosen: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand's name; the arguments of `chosen` only (of all of them when None)."""
    parser = argparse.ArgumentParser(
        prog="gangway",
        description="Gangway: an event-sourced gang scheduler for GPU training jobs on Apache Kafka.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, help_text, where in SUBCOMMANDS:
        if chosen is not None and name != chosen:
            sub.add_parser(name, help=help_text, description=help_text)
            continue
        module = command_of(where)
        example = getattr(module, "example", None) or getattr(module, "EXAMPLE", None)
        command = sub.add_parser(name, help=help_text, description=help_text,
                                 epilog=f"example: {example}" if example else None)
        module.add_arguments(command)
        command.set_defaults(run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    # the subcommand is the first word (the dispatcher itself takes no option but --help)
    chosen = next((word for word in words if not word.startswith("-")), "")
    args = build_parser(chosen).parse_args(words)
    try:
        return args.run(args)
    except AuthError as error:  # a principal, key or credential problem: one line, as every command says it
        print(f"gangway: {error}", file=sys.stderr)
        return 1


def entry() -> None:
    """The `gangway` executable: `main`, where a read-only command's process ends once it has answered
    (events/command.py `answered`)."""
    from events.command import ends_at_once

    ends_at_once()
    sys.exit(main())


if __name__ == "__main__":
    entry()
