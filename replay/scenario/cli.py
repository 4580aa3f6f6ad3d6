"""`gangway scenario run FILE... [--quiet] [--export-log OUT]`: plays scenario files through all four deciders.

Every event and decision is printed to stdout as one JSON line (offset, time, type, reason and
the event's fields); a summary per file and each unmet expectation go to stderr. `--export-log` writes
the scenario's log as an exported cell log (events/logfile.py), for the audit commands' `--log`. Exit
status: 0 when every expectation holds, 1 when one does not, 2 when a file is not a valid scenario.
"""

from __future__ import annotations

import argparse
import json
import sys

from events import models as m
from events.arguments import output_file
from events.logfile import CannotWriteLog, write_log_file
from replay.scenario.play import Outcome, ScenarioError, run_file


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    run_parser = sub.add_parser("run", help="run scenario files and check their expectations")
    run_parser.add_argument("files", nargs="+", metavar="FILE", help="scenario YAML files (docs/scenarios.md)")
    run_parser.add_argument("--quiet", action="store_true", help="print only a summary per file")
    run_parser.add_argument("--export-log", type=output_file, metavar="OUT",
                            help="write the scenario's log to OUT (one scenario file), for `gangway explain --log OUT`")
    run_parser.epilog = "example: gangway scenario run tests/scenarios/reclaim_within_cohort.yaml --export-log reclaim.avro"


def event_line(scenario: str, offset: int, event: m.Event) -> str:
    fields = event.model_dump(mode="json", exclude={"envelope"})
    head = {"scenario": scenario, "offset": offset, "at": event.envelope.at, "type": event.event_type,
            "reason": event.envelope.reason.value}
    return json.dumps({**head, **fields}, sort_keys=False)


def run(args: argparse.Namespace) -> int:
    if args.export_log is not None and len(args.files) != 1:
        print("gangway scenario run: --export-log takes the log of one scenario file", file=sys.stderr)
        return 2
    status = 0
    for path in args.files:
        try:
            outcome = run_file(path)
        except ScenarioError as error:
            print(f"INVALID {error}", file=sys.stderr)
            status = max(status, 2)
            continue
        if not args.quiet:
            for offset, event in enumerate(outcome.cell.log):
                print(event_line(outcome.scenario.name, offset, event))
        _summarise(outcome)
        if args.export_log is not None:
            try:
                written = write_log_file(args.export_log, outcome.cell.cell, enumerate(outcome.cell.log),
                                         source=f"scenario {outcome.source}")
            except CannotWriteLog as error:
                print(f"gangway scenario run: {error}", file=sys.stderr)
                return 1
            print(f"wrote {written:,} records of cell {outcome.cell.cell} to {args.export_log}", file=sys.stderr)
        if outcome.unmet:
            status = max(status, 1)
    return status


def _summarise(outcome: Outcome) -> None:
    total, unmet = len(outcome.results), outcome.unmet
    decisions = sum(1 for e in outcome.cell.log if e.is_decision)
    verdict = "FAIL" if unmet else "PASS"
    print(f"{verdict} {outcome.source} ({outcome.scenario.name}): {total - len(unmet)}/{total} expectations met, "
          f"{len(outcome.cell.log)} events, {decisions} decisions", file=sys.stderr)
    for result in unmet:
        print(f"  UNMET {outcome.source}: expected {result.describe()}; observed {result.observed}", file=sys.stderr)
