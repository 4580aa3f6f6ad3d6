"""One trace per job: OpenTelemetry spans whose W3C `traceparent` travels in the Kafka record headers, from
`gangway submit` through the intake and every decision about the job to the agent that starts its workers.

Spans are exported as JSON lines to a file (`GANGWAY_TRACE_FILE`, default `~/.gangway/traces.jsonl`; every
process appends to it) unless `OTEL_EXPORTER_OTLP_ENDPOINT` is set and the OTLP exporter is installed
(`pip install opentelemetry-exporter-otlp-proto-http`); `GANGWAY_TRACING=off` turns tracing off. `gangway
trace JOB` prints a job's span tree from the file. Tracing is I/O at the edges: deciders never see it, and
headers are not part of a record's value, so replay stays byte for byte.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Link, NonRecordingSpan, format_span_id, format_trace_id, get_current_span
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_PROPAGATOR = TraceContextTextMapPropagator()


def trace_file() -> Path:
    return Path(os.environ.get("GANGWAY_TRACE_FILE") or Path.home() / ".gangway" / "traces.jsonl").expanduser()


def enabled() -> bool:
    return os.environ.get("GANGWAY_TRACING", "on").lower() not in ("off", "0", "false", "no")


class JsonLinesExporter(SpanExporter):
    """Appends each span as one JSON line (one write per batch, O_APPEND, so processes sharing the file do not
    interleave within a line)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(json.dumps(span_record(s), sort_keys=True) + "\n" for s in spans)
        try:
            with self._lock:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                try:
                    os.write(fd, lines.encode())
                finally:
                    os.close(fd)
        except OSError:
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def span_record(span: ReadableSpan) -> dict:
    ctx = span.get_span_context()
    return {
        "trace_id": format_trace_id(ctx.trace_id), "span_id": format_span_id(ctx.span_id),
        "parent_id": format_span_id(span.parent.span_id) if span.parent else None,
        "name": span.name, "service": span.resource.attributes.get("service.name"),
        "pid": span.resource.attributes.get("process.pid"), "start_ns": span.start_time, "end_ns": span.end_time,
        "attributes": dict(span.attributes or {}),
        "links": [{"trace_id": format_trace_id(link.context.trace_id), "span_id": format_span_id(link.context.span_id)}
                  for link in span.links],
    }


def _exporter() -> SpanExporter:
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError as error:
            raise RuntimeError("OTEL_EXPORTER_OTLP_ENDPOINT is set but the OTLP exporter is not installed: "
                               "pip install opentelemetry-exporter-otlp-proto-http") from error
        return OTLPSpanExporter()
    return JsonLinesExporter(trace_file())


@dataclass
class Opened:
    """An open span, and the traceparent its children (and the records it writes) carry."""

    span: object
    traceparent: str


class Tracer:
    """Spans of one process (`gangway-<name>`); a no-op when tracing is off."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.on = enabled()
        self._provider: TracerProvider | None = None
        if self.on:
            self._provider = TracerProvider(resource=Resource.create(
                {"service.name": f"gangway-{name}", "process.pid": os.getpid()}))
            self._provider.add_span_processor(BatchSpanProcessor(_exporter(), schedule_delay_millis=200))
            self._tracer = self._provider.get_tracer("gangway")

    @contextmanager
    def span(self, name: str, parent: str | None = None, links: Sequence[str] = (),
             attributes: Mapping[str, object] | None = None) -> Iterator[Opened]:
        """A span, child of the `parent` traceparent (a new trace without one), linked to `links`."""
        if not self.on:
            yield Opened(None, parent or "")
            return
        context = _context(parent) if parent else Context()
        linked = [Link(get_current_span(_context(tp)).get_span_context()) for tp in links if tp and tp != parent]
        attrs = {k: v for k, v in (attributes or {}).items() if v is not None}
        with self._tracer.start_as_current_span(name, context=context, links=linked, attributes=attrs) as span:
            carrier: dict[str, str] = {}
            _PROPAGATOR.inject(carrier, context=_with(span))
            yield Opened(span, carrier.get("traceparent", ""))

    def flush(self) -> None:
        if self._provider is not None:
            self._provider.force_flush()

    def shutdown(self) -> None:
        if self._provider is not None:
            self._provider.shutdown()
            self._provider = None
            self.on = False


def _context(traceparent: str) -> Context:
    return _PROPAGATOR.extract({"traceparent": traceparent})


def _with(span) -> Context:
    from opentelemetry.trace import set_span_in_context

    return set_span_in_context(span)


def is_valid(traceparent: str | None) -> bool:
    if not traceparent:
        return False
    span = get_current_span(_context(traceparent))
    return not isinstance(span, NonRecordingSpan) or span.get_span_context().is_valid


# --- reading the file: `gangway trace JOB` --------------------------------------------------------------


def read_spans(path: Path | None = None) -> list[dict]:
    path = path or trace_file()
    spans = []
    try:
        with open(path) as lines:
            for line in lines:
                try:
                    spans.append(json.loads(line))
                except ValueError:
                    continue  # a line cut by a crash
    except FileNotFoundError:
        pass
    return spans


def job_traces(job: str, spans: Sequence[dict]) -> dict[str, list[dict]]:
    """The traces that hold a span about `job`, each with all its spans."""
    ids = {s["trace_id"] for s in spans if s.get("attributes", {}).get("job") == job}
    out: dict[str, list[dict]] = {}
    for span in spans:
        if span["trace_id"] in ids:
            out.setdefault(span["trace_id"], []).append(span)
    return out


def render_tree(spans: Sequence[dict]) -> list[str]:
    """The spans of one trace as an indented tree in start order: name, process, duration, key attributes."""
    by_id = {s["span_id"]: s for s in spans}
    children: dict[str | None, list[dict]] = {}
    for span in spans:
        parent = span["parent_id"] if span["parent_id"] in by_id else None
        children.setdefault(parent, []).append(span)
    start = min((s["start_ns"] for s in spans), default=0)
    lines: list[str] = []

    def walk(parent: str | None, depth: int) -> None:
        for span in sorted(children.get(parent, []), key=lambda s: (s["start_ns"], s["span_id"])):
            attrs = span.get("attributes", {})
            shown = " ".join(f"{k}={attrs[k]}" for k in ("reason", "basis_offset", "policy_version", "node", "origin")
                             if k in attrs)
            took = (span["end_ns"] - span["start_ns"]) / 1e6 if span.get("end_ns") else 0.0
            lines.append(f"{'  ' * depth}{span['name']}  [{span['service']} pid {span['pid']}]  "
                         f"+{(span['start_ns'] - start) / 1e6:,.1f} ms, {took:,.2f} ms  {shown}".rstrip())
            walk(span["span_id"], depth + 1)

    walk(None, 0)
    return lines
