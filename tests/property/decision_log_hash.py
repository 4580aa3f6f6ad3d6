"""Prints a SHA-256 of every decision, Avro-encoded, that the scenarios and seeded random streams
produce; run under different PYTHONHASHSEED values, the digests must agree byte for byte."""

from __future__ import annotations

import hashlib
import random
import sys
from pathlib import Path

from events.codec import EventCodec
from replay.scenario.play import run, run_file
from tests.property.streams import RandomChooser, stream

ROOT = Path(__file__).resolve().parents[2]


def digest() -> tuple[str, int]:
    codec = EventCodec()
    sha = hashlib.sha256()
    decisions = 0
    outcomes = [run_file(p) for p in sorted((ROOT / "tests" / "scenarios").glob("*.yaml"))]
    outcomes += [run(stream(RandomChooser(random.Random(seed)), 60)) for seed in range(16)]
    for outcome in outcomes:
        for event in outcome.cell.log:
            if event.is_decision:
                sha.update(codec.encode(event))
                decisions += 1
    return sha.hexdigest(), decisions


if __name__ == "__main__":
    hexdigest, count = digest()
    sys.stdout.write(f"{hexdigest} {count}\n")
