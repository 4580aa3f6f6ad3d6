"""The `gangway` command: one thin dispatcher over every subcommand, so it lives in the top layer."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

# Each entry: (subcommand, help, module that provides `add_arguments(parser)` and `run(args) -> int`).
SUBCOMMANDS: tuple[tuple[str, str, str], ...] = (
    ("schemas", "list, check and release the Avro event schemas", "events.schemas_cli"),
    ("scenario", "run scenario files in virtual time and check their expectations", "services.simulation.scenario_cli"),
)


def build_parser() -> argparse.ArgumentParser:
    import importlib

    parser = argparse.ArgumentParser(
        prog="gangway",
        description="Gangway: an event-sourced gang scheduler for GPU training jobs on Apache Kafka.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, help_text, module_name in SUBCOMMANDS:
        module = importlib.import_module(module_name)
        command = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(command)
        command.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    run: Callable[[argparse.Namespace], int] = args._run
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
