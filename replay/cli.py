"""The `gangway` command: one thin dispatcher over every subcommand, so it lives in the top layer."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from types import ModuleType

from events import broker_cli, schemas_cli, topics_cli
from services.simulation import sim_cli

# Each module provides `add_arguments(parser)` and `run(args) -> int`.
SUBCOMMANDS: tuple[tuple[str, str, ModuleType], ...] = (
    ("kafka", "start, stop or inspect the local Apache Kafka broker (no Docker needed)", broker_cli),
    ("topics", "create Gangway's topics and print the topic catalogue", topics_cli),
    ("schemas", "list, check, write and release the Avro event schemas", schemas_cli),
    ("sim", "replay job traces in virtual time under a policy (or compare policies) and measure", sim_cli),
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gangway",
        description="Gangway: an event-sourced gang scheduler for GPU training jobs on Apache Kafka.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, help_text, module in SUBCOMMANDS:
        command = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(command)
        command.set_defaults(run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
