"""`gangway log export`: a cell's log (or part of it) as a portable Avro Object Container File
(events/logfile.py), which every audit command reads with `--log FILE` exactly as it reads the live cell."""

from __future__ import annotations

import argparse

from events.arguments import output_file
from events.logfile import CannotWriteLog, write_log_file
from replay.source import AuditError, add_source_arguments, audited, position, read_source, window

example = "gangway log export --cell cell-a --to 2024-05-01T12:00Z --out cell-a.avro"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    export = sub.add_parser("export", help="write a cell's log to an Avro Object Container File",
                            description="Writes every record of a cell's log, with its offset and the writer schema, "
                                        "to an Avro Object Container File readable by any Avro tool.",
                            epilog=f"example: {example}")
    add_source_arguments(export)
    export.add_argument("--from", dest="start", type=position, metavar="OFFSET|TIME",
                        help="first record to export (default: offset 0); audits need the log from offset 0")
    export.add_argument("--to", dest="end", type=position, metavar="OFFSET|TIME", help="last record (default: the end)")
    export.add_argument("--out", type=output_file, required=True, metavar="FILE")


def run(args: argparse.Namespace) -> int:
    return audited("log export", export)(args)


def export(args: argparse.Namespace) -> int:
    log = read_source(args)
    records = window(log, args.start, args.end)
    try:
        written = write_log_file(args.out, log.cell, records, source=log.origin,
                                 partial=records[0][0] != log.records[0][0])
    except CannotWriteLog as error:
        raise AuditError(str(error)) from None
    span = f"offsets {records[0][0]}..{records[-1][0]}" if records else "no records"
    print(f"wrote {written:,} records ({span}) of cell {log.cell} to {args.out}")
    return 0
