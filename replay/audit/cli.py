"""The audit commands: `explain`, `replay state`, `whatif` and `report`. Each reads a cell's log through
replay/source.py (`--cell C` live, or `--log FILE` exported), folds it with the pure parts of replay/audit/,
and prints a table or JSON. Bad input is one line on stderr and exit 1; usage errors exit 2."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import TYPE_CHECKING

from events.arguments import positive_int
from events.command import Command, answered
from replay.audit import snapshot
from replay.audit.text import clock, table
from replay.source import AuditError, add_source_arguments, audited, position, read_source, upto, window

if TYPE_CHECKING:
    from replay.audit.timeline import Timeline
    from replay.audit.why import Why
    from services.core.forecast import Estimate

# Each command imports the deciders, the simulator's metrics or the ledger when it runs: `replay state`, which
# needs none of them, starts without their import.

# --- explain ------------------------------------------------------------------------------------------------------


def _explain_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", metavar="JOB", help="the job's id")
    parser.add_argument("--why", action="store_true",
                        help="re-run the deciders at the latest basis and show the binding constraint with numbers")
    parser.add_argument("--at", type=position, metavar="OFFSET|TIME", help="explain as of this point of the log")
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    add_source_arguments(parser)


def _explain(args: argparse.Namespace) -> int:
    from replay.audit.policy import recorded
    from replay.audit.timeline import timeline
    from replay.audit.why import why
    from services.core.forecast import forecast

    log = read_source(args)
    records = upto(log, args.at)
    story, state = timeline(records, args.job)
    if story.state is None and not story.lines:
        raise AuditError(f"unknown job {args.job!r} in {log.origin} (through offset {story.offset})")
    policy = recorded(records)
    estimate = forecast(state, policy).get(args.job) if story.state == "queued" else None
    reasons = why(state, args.job, policy, estimate) if args.why and story.state is not None else None
    if args.output == "json":
        print(json.dumps({"job": args.job, "cell": log.cell, "state": story.state, "reason": story.reason,
                          "offset": story.offset, "policy": policy.version,
                          "lines": [asdict(line) for line in story.lines],
                          "queue": _estimate_json(estimate), "why": asdict(reasons) if reasons else None}, indent=1))
        return answered(0)
    print(render_timeline(story, log.cell))
    if estimate is not None:
        print(render_estimate(estimate))
    if reasons is not None:
        print(render_why(reasons))
    return answered(0)


def render_timeline(story: Timeline, cell: str) -> str:
    head = (f"job {story.job_id} in cell {cell}: {story.state or 'never admitted to the cell'}"
            + (f" ({story.reason})" if story.reason else "") + f", as of offset {story.offset}")
    rows = [[clock(line.at), str(line.offset), line.event, line.reason,
             "-" if line.basis is None else str(line.basis), line.policy or "-", line.message] for line in story.lines]
    return head + "\n" + table(rows, ["TIME (UTC)", "OFFSET", "EVENT", "REASON", "BASIS", "POLICY", "MESSAGE"])


def render_estimate(e: Estimate) -> str:
    start = clock(e.start) if e.start is not None else "unknown"
    window_ = (f" (between {clock(e.earliest)} and {clock(e.latest)})"
               if e.start is not None and e.earliest is not None and e.latest is not None and e.earliest < e.latest
               else "")
    return (f"queue: position {e.team_position} of {e.team_waiting} in its team, {e.cell_position} of "
            f"{e.cell_waiting} in the cell's admission order\n"
            f"estimated start: {start}{window_} [{e.basis.value}] {e.detail}")


def render_why(w: Why) -> str:
    lines = [f"why (the deciders re-run at offset {w.offset}, {clock(w.at)}, policy {w.policy}):"]
    lines += [f"  {v}" for v in w.verdicts]
    lines += [f"  - {c}" for c in w.constraints]
    return "\n".join(lines)


def _estimate_json(e: Estimate | None) -> dict | None:
    if e is None:
        return None
    out = asdict(e)
    out["basis"] = e.basis.value
    out["waits_for"] = list(e.waits_for)
    return out


# --- replay state -------------------------------------------------------------------------------------------------


def _state_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="what", required=True, metavar="WHAT")
    state = sub.add_parser("state", help="the cell as it was at an offset or time",
                           description="The cell as it was after the record at OFFSET (or the last record at or "
                                       "before TIME): nodes by domain, jobs by state, quota use per team.",
                           epilog="example: gangway replay state --at 1200 --log cell-a.avro -o json")
    state.add_argument("--at", type=position, required=True, metavar="OFFSET|TIME")
    state.add_argument("-o", "--output", choices=("table", "json"), default="table")
    add_source_arguments(state)


def _state(args: argparse.Namespace) -> int:
    log = read_source(args, until=args.at)
    view = snapshot.at(upto(log, args.at), log.cell)
    print(json.dumps(asdict(view), indent=1) if args.output == "json" else snapshot.render(view))
    return answered(0)


# --- whatif ---------------------------------------------------------------------------------------------------------


def _whatif_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--policy", required=True, metavar="P", help="a policy of the registry (services/policies.py)")
    parser.add_argument("--from", dest="start", type=position, metavar="OFFSET|TIME",
                        help="run P from here on (default: from the start of the log); before it, the log as recorded")
    parser.add_argument("--to", dest="end", type=position, metavar="OFFSET|TIME",
                        help="the last input re-driven and the end of the comparison (default: the log's end)")
    parser.add_argument("--movers", type=positive_int, default=10, metavar="N", help="how many most-moved jobs to list")
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    add_source_arguments(parser)


def _whatif(args: argparse.Namespace) -> int:
    from replay.audit import whatif
    from replay.audit.policy import named, recorded

    policy = named(args.policy)
    log = read_source(args)
    records = upto(log, args.end)
    cut = window(log, None, args.start)[-1][0] if args.start is not None else -1
    if cut > (records[-1][0] if records else -1):
        raise AuditError(f"--from {args.start} is after --to {args.end}: nothing to re-drive")
    result = whatif.compare(records, log.cell, policy, cut, args.movers, recorded(records).version)
    print(json.dumps(asdict(result), indent=1) if args.output == "json" else whatif.render(result))
    return answered(0)


# --- report -----------------------------------------------------------------------------------------------------------


def _report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--team", action="append", metavar="T", help="only this team (repeatable; default all)")
    parser.add_argument("--from", dest="start", type=position, metavar="OFFSET|TIME", help="from here (default: start)")
    parser.add_argument("--to", dest="end", type=position, metavar="OFFSET|TIME", help="to here (default: the end)")
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    add_source_arguments(parser)


def _report(args: argparse.Namespace) -> int:
    from replay.audit import ledger

    log = read_source(args)
    records = upto(log, args.end)
    start = window(log, args.start, args.end)[0] if args.start is not None and records else None
    ledgers = ledger.fold(records, start[1].envelope.at if start else None)
    unknown = sorted(set(args.team or ()) - set(ledgers.teams))
    if unknown:
        known = ", ".join(sorted(ledgers.teams)) or "none"
        raise AuditError(f"unknown team {unknown[0]!r} in {log.origin}; teams: {known}")
    chosen = ledgers.only(args.team) if args.team else ledgers
    print(json.dumps(chosen.as_json(), indent=1) if args.output == "json" else ledger.render(chosen))
    return answered(0)


#: The subcommands this module runs, by name; their help is in the dispatcher (replay/cli.py).
COMMANDS: dict[str, Command] = {
    "explain": Command(_explain_arguments, audited("explain", _explain),
                       "gangway explain llm-7 --why --log cell-a.avro"),
    "replay": Command(_state_arguments, audited("replay state", _state),
                      "gangway replay state --at 2024-05-01T10:00Z"),
    "whatif": Command(_whatif_arguments, audited("whatif", _whatif), "gangway whatif --policy fifo --log cell-a.avro"),
    "report": Command(_report_arguments, audited("report", _report),
                      "gangway report --team nlp --from 2024-05-01T00:00Z --to 2024-05-08T00:00Z"),
}
