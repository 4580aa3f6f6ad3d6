"""`gangway trace JOB`: a job's trace as a span tree, from the JSON-lines span file (events/tracing.py)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from events.tracing import job_traces, read_spans, render_tree, trace_file

example = "gangway trace train-mlp"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", help="the job id")
    parser.add_argument("--file", type=Path, default=None,
                        help=f"the span file (default $GANGWAY_TRACE_FILE or {trace_file()})")
    parser.add_argument("-o", "--output", choices=("tree", "json"), default="tree")


def run(args: argparse.Namespace) -> int:
    path = args.file or trace_file()
    if not path.exists():
        print(f"gangway trace: no span file {path} (spans are written there by every gangway process unless "
              f"GANGWAY_TRACING=off or OTEL_EXPORTER_OTLP_ENDPOINT is set)", file=sys.stderr)
        return 1
    traces = job_traces(args.job, read_spans(path))
    if not traces:
        print(f"gangway trace: no spans about job {args.job!r} in {path}", file=sys.stderr)
        return 1
    if args.output == "json":
        print(json.dumps(traces, indent=2, sort_keys=True))
        return 0
    for trace_id, spans in sorted(traces.items(), key=lambda t: min(s["start_ns"] for s in t[1])):
        processes = len({(s["service"], s["pid"]) for s in spans})
        print(f"trace {trace_id}: {len(spans)} spans from {processes} processes")
        for line in render_tree(spans):
            print(f"  {line}")
    return 0
