"""How a `gangway` command answers a mistake it expects: one line per line of the error on stderr, prefixed with
the command's name, and exit 1 (a Kafka error in the words of `kafka_problem`). Anything else is a bug and
keeps its traceback."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from confluent_kafka import KafkaException

from events.auth import kafka_problem

Body = Callable[[argparse.Namespace], int]


def guarded(name: str, body: Body, *expected: type[Exception]) -> Body:
    """`body`, with the `expected` errors answered in one line each and exit 1."""
    def run(args: argparse.Namespace) -> int:
        try:
            return body(args)
        except expected as error:
            text = kafka_problem(error) if isinstance(error, KafkaException) else str(error)
            for line in text.splitlines() or [""]:
                print(f"gangway {name}: {line}", file=sys.stderr)
            return 1
    return run
