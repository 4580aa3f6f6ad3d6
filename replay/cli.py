"""The `gangway` command: one thin dispatcher over every subcommand, so it lives in the top layer."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from events import broker_cli, load_cli, principal_cli, schemas_cli, topics_cli, trace_cli
from events.auth import AuthError
from projections import watch
from replay import demo, log_cli, rebuild, verify
from replay.api import cli as api_cli
from replay.audit import cli as audit_cli
from replay.scenario import cli as scenario_cli
from replay.sim import cli as sim_cli
from services import run_cli
from services.agent import agent_cli, fleet_cli
from services.launcher import cli as launcher_cli

# Each module (or command object) provides `add_arguments(parser)` and `run(args) -> int`, and may give an `example`.
SUBCOMMANDS: tuple[tuple[str, str, Any], ...] = (
    ("demo", "the whole system on a local broker: services, a simulated fleet, teams replaying a trace, shown live",
     demo),
    ("kafka", "start, stop or inspect the local Apache Kafka broker (no Docker needed)", broker_cli),
    ("principal", "create Kafka principals (teams' launchers, agents, services, readers) and print their secrets",
     principal_cli),
    ("topics", "create Gangway's topics and print the topic catalogue", topics_cli),
    ("schemas", "list, check, write and release the Avro event schemas", schemas_cli),
    ("run", "run a service (admitter, placer, preemptor, recovery), the clock, or all of them on Kafka", run_cli),
    ("watch", "live terminal view of a cell: GPUs and queues per team, latest decisions", watch),
    ("projection", "rebuild a cell's projection from its log, or compare two projections", rebuild),
    ("fleet", "run a simulated fleet of GPU nodes (node agents) on Kafka, with failure injection", fleet_cli),
    ("load", "submit jobs from ITP / Philly traces at their (compressed) submission times", load_cli),
    ("verify", "re-run each service over a cell's log and check it reproduces every decision it wrote", verify),
    ("scenario", "run scenario files in virtual time and check their expectations", scenario_cli),
    ("log", "export a cell's log to a portable Avro file that every audit command reads with --log", log_cli),
    *audit_cli.COMMANDS,
    ("api", "the read-model query API (HTTP JSON, OpenAPI) and the live dashboard, with its projector", api_cli),
    ("sim", "replay job traces in virtual time under a policy (or compare policies) and measure", sim_cli),
    *launcher_cli.COMMANDS,
    ("trace", "print a job's trace: the span tree from submission through every decision to the agents", trace_cli),
    ("agent", "run a node agent: register a node, heartbeat, run its placed workers as real processes", agent_cli),
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gangway",
        description="Gangway: an event-sourced gang scheduler for GPU training jobs on Apache Kafka.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, help_text, module in SUBCOMMANDS:
        example = getattr(module, "example", None) or getattr(module, "EXAMPLE", None)
        command = sub.add_parser(name, help=help_text, description=help_text,
                                 epilog=f"example: {example}" if example else None)
        module.add_arguments(command)
        command.set_defaults(run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except AuthError as error:  # a principal, key or credential problem: one line, as every command says it
        print(f"gangway: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
