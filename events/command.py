"""How a `gangway` command answers a mistake it expects: one line per line of the error on stderr, prefixed with
the command's name, and exit 1 (a Kafka error in the words of `kafka_problem`). Anything else is a bug and
keeps its traceback."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

from events.auth import kafka_problem

Body = Callable[[argparse.Namespace], int]

#: Whether a command that has printed its answer ends the process there (`gangway` as an executable: `ends_at_once`).
_ends_at_once = False


def ends_at_once() -> None:
    """From now on `answered` ends the process: for the `gangway` executable, never for commands run in-process."""
    global _ends_at_once
    _ends_at_once = True


def answered(code: int) -> int:
    """A read-only command's exit once its answer is printed. Run as the `gangway` executable, the process ends here,
    without freeing what the command read and folded (a long log's hundreds of thousands of events: 0.2-0.3 s of a
    4 s audit) or tearing the interpreter down, as mypy's `hard_exit` does; run in-process, it returns `code`."""
    if _ends_at_once:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except OSError:
            return code  # the output could not be written: the ordinary exit reports it
        os._exit(code)
    return code


@dataclass(frozen=True)
class Command:
    """One `gangway` subcommand: the dispatcher (replay/cli.py) calls `add_arguments` and `run`."""

    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Body
    example: str


def guarded(name: str, body: Body, *expected: type[Exception]) -> Body:
    """`body`, with the `expected` errors answered in one line each and exit 1."""
    def run(args: argparse.Namespace) -> int:
        try:
            return body(args)
        except expected as error:
            kafka = sys.modules.get("confluent_kafka")  # a command that never loaded it meets no Kafka error
            text = kafka_problem(error) if kafka is not None and isinstance(error, kafka.KafkaException) \
                else str(error)
            for line in text.splitlines() or [""]:
                print(f"gangway {name}: {line}", file=sys.stderr)
            return 1
    return run


def needs_broker(name: str, body: Body) -> Body:
    """`body`, run only once a Kafka broker answers at `args.bootstrap_servers`; else one line and exit 1 (a
    long-running command would otherwise wait on the broker out of reach of Ctrl-C)."""
    def run(args: argparse.Namespace) -> int:
        from events.broker import unreachable

        problem = unreachable(args.bootstrap_servers)
        if problem:
            print(f"gangway {name}: {problem}", file=sys.stderr)
            return 1
        return body(args)
    return run
