"""What a cell refuses to fold: every record is checked against the state before `evolve` folds it, so no
record can take a fold (or a decider behind it) down, and no fact is trusted beyond what the state allows.

A refused record is not folded at all; the admitter answers it with `RecordRefused` (services/core/replica.py),
and every replica and replay refuses it the same way because the check is a pure function of the state and
the record. The bounds are the cell's own configuration (`CellConfigured`), so they are on the log too.

Stale facts are not refusals: a report about an earlier attempt of a job, or a heartbeat older than one
already seen, is simply ignored by the fold, as agents send them in the normal course of things.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from events import models as m
from events.models import Reason
from projections.jobs import JobState
from projections.value import Value

#: The last representable moment: year 2100 in ms since the epoch. Later stamps overflow no field, but no
#: cell runs that long; refusing them keeps deadlines computed from them inside a 64-bit long.
LATEST_MS = 4_102_444_800_000
MAX_DETAIL_LENGTH = 4096
MAX_LABELS = 64


@dataclass(frozen=True)
class Limits(Value):
    """A cell's bounds, from its CellConfigured (the defaults are CellConfigured's)."""

    max_gpus_per_node: int = 64
    max_workers: int = 4096
    max_name_length: int = 253
    max_tick_jump_ms: int | None = 3_600_000
    max_event_lead_ms: int | None = 3_600_000

    @classmethod
    def of(cls, e: m.CellConfigured) -> Limits:
        return cls(e.max_gpus_per_node, e.max_workers, e.max_name_length, e.max_tick_jump_ms, e.max_event_lead_ms)


@dataclass(frozen=True)
class Refusal:
    """Why a record was not folded."""

    reason: Reason
    detail: str


_RUNS = (JobState.PLACED, JobState.RUNNING, JobState.PREEMPTING)
#: Free text (messages, and what a job runs: its command, environment and paths) is bounded by MAX_DETAIL_LENGTH,
#: not by the length of a name.
_FREE_TEXT = frozenset({"detail", "message", "error", "command", "env", "working_dir", "checkpoint_dir"})
#: What no id or name may hold: the ASCII and Latin-1 control codes and the invisible formatting characters
#: (zero-width, bidirectional overrides, line and paragraph separators). Names are printed by every command and
#: page, and NUL separates the parts of the read model's keys: a name holding these could rewrite an operator's
#: terminal, pass for another name, or read as another job's rows. A fixed list rather than `str.isprintable`,
#: whose answer moves with Python's Unicode tables: every replay refuses the same records.
_NOT_IN_NAMES = re.compile(r"[\x00-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e"
                           r"\u2060-\u206f\ufeff\ufff9-\ufffb]")
#: Free text may break lines and hold tabs; no other control code, and no bidirectional override.
_NOT_IN_TEXT = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


#: Which service makes each decision: a decision that names another producer is refused (NOT_ITS_WRITER), so a
#: record on the log that claims to be a decision from anything but the service that decides it is never folded.
#: (Kafka's ACLs let only services write the cell's log at all: events/auth.py.)
SERVICES = frozenset({"admitter", "placer", "preemptor", "recovery"})
DECIDED_BY: dict[type, frozenset[str]] = {
    **dict.fromkeys((m.JobQueued, m.JobAdmitted, m.JobRejected, m.JobCancelled), frozenset({"admitter"})),
    m.PlacementPending: frozenset({"placer"}),
    **dict.fromkeys((m.PreemptionRequested, m.JobPreempted), frozenset({"preemptor"})),
    # A NodeFailed may also be an operator's (an admin's; scenarios fail nodes so); inputs never carry decisions.
    m.NodeFailed: frozenset({"recovery", "operator"}),
    **dict.fromkeys((m.GpuFaulted, m.NodeRecovered, m.SpareActivated, m.JobInterrupted,
                     m.JobRequeued, m.JobSucceeded, m.JobFailed), frozenset({"recovery"})),
    m.RequestRejected: frozenset({"admitter", "recovery"}),
    m.PreemptionWithdrawn: frozenset({"preemptor"}),
    m.CapacityHeld: frozenset({"preemptor", "recovery"}),  # freed for a beneficiary; kept through a back-off
    m.CapacityReleased: frozenset({"preemptor", "admitter"}),
}
#: What each kind of input topic may carry (services/intake.py takes them in and stamps `envelope.origin`).
FROM_TEAM = (m.JobSubmitted, m.JobCancelRequested)
#: An agent may configure a cell that nobody has configured yet (its topology levels, so that the first agents
#: of a new cell can register); once configured, only operators reconfigure it.
FROM_NODE = (m.NodeRegistered, m.NodeHeartbeat, m.GpuErrorReported, m.NodeHealthCheckPassed, m.WorkerStarted,
             m.WorkerExited, m.CheckpointCompleted, m.CellConfigured)
FROM_OPERATOR = (m.CellConfigured, m.CohortDefined, m.TeamDefined, m.QuotaSet, m.PriorityClassDefined,
                 m.NodeCordoned, m.NodeUncordoned)


def not_its_writer(event: m.Event, origin: str | None) -> str:
    """Why the writer that `origin` proves ('team/T', 'node/N', 'operator') may not write `event`, or ''. Pure;
    the intake asks it of every input before taking it in, and the fold asks it again."""
    kind, _, name = (origin or "").partition("/")
    if event.is_decision:
        return f"a {event.event_type} from {origin}: only services decide"
    if kind == "team":
        if not isinstance(event, FROM_TEAM):
            return f"a {event.event_type} from team {name}'s input: a team writes only submissions and cancels"
        if event.team != name:
            return f"a {event.event_type} for team {event.team!r} from team {name}'s input"
    elif kind == "node":
        if not isinstance(event, FROM_NODE):
            return f"a {event.event_type} from node {name}'s input: an agent writes only its node's facts"
        node = m.field_of(event, "node")
        if node is not None and node != name:
            return f"a {event.event_type} about node {node!r} from node {name}'s input"
    elif kind == "operator":
        if not isinstance(event, FROM_OPERATOR):
            return f"a {event.event_type} from the operators' input: operators write configuration and cordons"
    elif origin is not None:
        return f"unknown origin {origin!r}"
    return ""


def _provenance(state, event: m.Event) -> Refusal | None:
    """A record its signer may not write, a decision from a producer that does not make it, or an input its origin
    may not write."""
    origin = event.envelope.origin
    if origin is not None and origin.startswith(m.UNVERIFIED):
        signer = origin.removeprefix(m.UNVERIFIED)
        signed = "not signed by any writer of the log" if signer == "unsigned" else \
            f"signed by {_short(signer)!r}, which may not write it"
        return Refusal(Reason.NOT_ITS_WRITER, f"a {event.event_type} claiming {_short(event.envelope.producer)!r} "
                                              f"is {signed}")
    if event.is_decision:
        producer = event.envelope.producer
        allowed = DECIDED_BY.get(type(event), SERVICES)
        if producer not in allowed:
            return Refusal(Reason.NOT_ITS_WRITER, f"a {event.event_type} from {_short(producer)!r}: only "
                                                  f"{', '.join(sorted(allowed))} may decide it")
        return None
    if origin is None:  # not taken in through an input topic: only a cancel's team is left to check
        why = _cancel_of_another_team(state, event)
        return Refusal(Reason.NOT_ITS_WRITER, why[:MAX_DETAIL_LENGTH]) if why else None
    why = not_its_writer(event, origin)
    taken = state.taken.get(origin, -1) if event.envelope.origin_offset is not None else None
    if not why and taken is not None and event.envelope.origin_offset <= taken:
        why = (f"a {event.event_type} from {origin}'s input offset {event.envelope.origin_offset}, which the cell "
               f"has taken in already (up to offset {taken}): a copy written again")
    if not why:
        why = _cancel_of_another_team(state, event)
    if not why and isinstance(event, m.CellConfigured) and origin.startswith("node/") and \
            state.cluster.levels and (tuple(event.topology_levels), Limits.of(event)) != (tuple(state.cluster.levels),
                                                                                         state.limits):
        why = f"{origin} may not reconfigure cell {state.cell}, which is configured: operators do"
    if not why and isinstance(event, m.CheckpointCompleted) and origin.startswith("node/"):
        job = state.jobs.get(event.job_id)
        node = origin.removeprefix("node/")
        if job is not None and event.attempt == job.attempt and job.assignments and \
                node not in {n for _, n, _ in job.assignments}:
            why = f"node {node} reports a checkpoint of {event.job_id} attempt {event.attempt}, which runs elsewhere"
    return Refusal(Reason.NOT_ITS_WRITER, why[:MAX_DETAIL_LENGTH]) if why else None


def _cancel_of_another_team(state, event: m.Event) -> str:
    """Why a cancel that names a team may not cancel its job (another team's), or ''."""
    if isinstance(event, m.JobCancelRequested) and event.team is not None:
        job = state.jobs.get(event.job_id)
        if job is not None and job.team != event.team:
            return f"team {printable(event.team)} may not cancel {event.job_id}, a job of team {job.team}"
    return ""


def refusal(state, event: m.Event) -> Refusal | None:
    """Why the cell must not fold `event` now, or None. Pure; `state` is a CellState. Decisions are checked only
    for their producer here: the fold validates them against the state (a stale one is superseded), and their
    fields come from records that passed this check."""
    envelope = event.envelope.__dict__  # every record passes here: its fields are read without pydantic's lookups
    kind = type(event)
    forged = _provenance(state, event)
    if forged is not None or event.is_decision:
        return forged
    cell = envelope["cell"]
    if state.cell and cell != state.cell:
        return Refusal(Reason.WRONG_CELL, f"names cell {_short(cell)!r}, this is {state.cell!r}")
    at = envelope["at"]
    if not 0 <= at <= LATEST_MS:
        return Refusal(Reason.TIME_OUT_OF_RANGE, f"stamped {at}, outside 0..{LATEST_MS}")
    max_name = state.limits.max_name_length
    if len(envelope["event_id"]) > max_name or len(envelope["producer"]) > max_name or \
            len(envelope["causation_id"] or "") > max_name or len(envelope["correlation_id"] or "") > max_name or \
            len(envelope["policy_version"] or "") > max_name:
        return Refusal(Reason.OVERSIZED, _oversized_envelope(envelope, max_name))
    fields = _TEXT_FIELDS.get(kind)
    if fields is None:
        fields = _text_fields(kind)
    oversized = _oversized_fields(event, fields, max_name) if fields else ""
    if oversized:
        return Refusal(Reason.OVERSIZED, oversized)
    hidden = _hidden_character(envelope, event, fields)
    if hidden:
        return Refusal(Reason.CONTROL_CHARACTER, hidden)
    check = _CHECKS.get(kind)
    return check(state, event) if check is not None else None


def _short(text: str) -> str:
    return text if len(text) <= 40 else text[:40] + "..."


def _oversized_envelope(envelope: dict, max_name: int) -> str:
    """Which of an envelope's ids is longer than the cell allows, or ''."""
    for name in _ENVELOPE_TEXT:
        value = envelope[name]
        if value is not None and len(value) > max_name:
            return f"envelope.{name} is {len(value):,} characters, more than {max_name}"
    return ""


def _oversized_fields(event: m.Event, text_fields: tuple[tuple[str, bool, bool], ...], max_name: int) -> str:
    """A field of the event longer than the cell allows (ids and names; free text has a larger bound), or ''."""
    fields = event.__dict__
    for name, is_text, free in text_fields:
        value = fields[name]
        if value is None:
            continue
        bound = MAX_DETAIL_LENGTH if free else max_name
        if is_text:
            if len(value) > bound:
                return f"{name} is {len(value):,} characters, more than {bound}"
        elif len(value) > MAX_LABELS:
            return f"{name} has {len(value)} entries, more than {MAX_LABELS}"
        elif value and any(len(part) > bound for part in _parts(value)):
            return f"{name} holds an entry longer than {bound} characters"
    return ""


def _hidden_character(envelope: dict, event: m.Event, text_fields: tuple[tuple[str, bool, bool], ...]) -> str:
    """The first of the record's texts, names and ids that holds a character it may not hold, described, or ''.
    A string Python calls printable (nearly every one) holds none of them, whatever Python's Unicode tables say of
    other characters, and needs no search; any other is searched, so the answer never moves with those tables."""
    fields = event.__dict__
    for name, is_text, free in text_fields:
        value = fields[name]
        if value:
            forbidden = _NOT_IN_TEXT if free else _NOT_IN_NAMES
            for part in ((value,) if is_text else _parts(value)):
                if not part.isprintable() and (found := forbidden.search(part)) is not None:
                    return _held(name, part, found, free)
    for name in _ENVELOPE_NAMES:
        value = envelope[name]
        if value and not value.isprintable() and (found := _NOT_IN_NAMES.search(value)) is not None:
            return _held(f"envelope.{name}", value, found, False)
    return ""


def _parts(value: list | dict) -> list[str]:
    """The strings of a list field, or the keys and values of a dict field."""
    items = [*value.keys(), *value.values()] if isinstance(value, dict) else value
    return [part for part in items if isinstance(part, str)]


def _held(name: str, value: str, found: re.Match, free: bool) -> str:
    return (f"{name} holds U+{ord(found.group()):04X} at {found.start()} (\"{printable(_short(value))}\"): "
            f"{'text' if free else 'an id or name'} may hold no control or invisible formatting character")


def printable(text: str) -> str:
    """`text` with each character no name may hold written as its escape (\\x1b, \\u202e): what a refusal quotes
    of a record it refused, so the refusal itself prints as it reads."""
    if _NOT_IN_NAMES.search(text) is None:
        return text
    return _NOT_IN_NAMES.sub(_escape, text)


def _escape(found: re.Match) -> str:
    code = ord(found.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


_ENVELOPE_TEXT = ("event_id", "producer", "causation_id", "correlation_id", "policy_version")
_ENVELOPE_NAMES = ("cell", *_ENVELOPE_TEXT)
_TEXT_FIELDS: dict[type, tuple[tuple[str, bool, bool], ...]] = {}


def _text_fields(kind: type[m.Record]) -> tuple[tuple[str, bool, bool], ...]:
    """The fields of an event type that hold text, computed once: (name, whether it is one string rather than a
    list or dict of them, whether it is free text)."""
    fields = _TEXT_FIELDS.get(kind)
    if fields is None:
        out = []
        for name, info in kind.model_fields.items():
            text = str(info.annotation)
            if name == "envelope":
                continue
            if info.annotation in (str, str | None):
                out.append((name, True, name in _FREE_TEXT))
            elif "list[str]" in text or "dict[str, str]" in text:
                out.append((name, False, name in _FREE_TEXT))
        fields = _TEXT_FIELDS[kind] = tuple(out)
    return fields


#: The least a cell's limits may be: below them the cell would refuse ordinary records (event ids alone run to
#: dozens of characters), the CellConfigured that could raise them again included.
LEAST_LIMITS = {"max_gpus_per_node": 1, "max_workers": 1, "max_name_length": 64, "max_tick_jump_ms": 1_000,
                "max_event_lead_ms": 1_000}


def _configured(state, e: m.CellConfigured) -> Refusal | None:
    low = [f"{name} {getattr(e, name)} (at least {least:,})" for name, least in LEAST_LIMITS.items()
           if getattr(e, name) is not None and getattr(e, name) < least]
    return Refusal(Reason.OVERSIZED, "limits a cell could not live with: " + ", ".join(low)) if low else None


def _tick(state, e: m.Tick) -> Refusal | None:
    jump = state.limits.max_tick_jump_ms
    if state.clock is not None and jump is not None and e.envelope.at > state.clock + jump:
        return Refusal(Reason.TIME_OUT_OF_RANGE, f"a Tick {e.envelope.at - state.clock:,} ms past the cell's "
                                                 f"clock; at most {jump:,} ms")
    return None


def _submitted(state, e: m.JobSubmitted) -> Refusal | None:
    lead = state.limits.max_event_lead_ms
    if state.clock is not None and lead is not None and e.envelope.at < state.clock - lead:
        return Refusal(Reason.TIME_OUT_OF_RANGE, f"submitted {state.clock - e.envelope.at:,} ms before the cell's "
                                                 f"clock; at most {lead:,} ms")
    return None


def _registered(state, e: m.NodeRegistered) -> Refusal | None:
    if not 1 <= e.gpus <= state.limits.max_gpus_per_node:
        return Refusal(Reason.OVERSIZED, f"{e.gpus} GPUs, a node has 1..{state.limits.max_gpus_per_node}")
    old = state.cluster.nodes.get(e.node)
    in_use = old is not None and (old.holder or old.reserved_for or old.claimed)
    if in_use and (old.gpus, old.gpu_type) != (e.gpus, e.gpu_type):
        return Refusal(Reason.NODE_IN_USE, f"{e.node} has work on it; it may not change from {old.gpus} "
                                           f"{old.gpu_type} to {e.gpus} {e.gpu_type} GPUs")
    return None


def _worker_fact(state, e: m.WorkerStarted | m.WorkerExited) -> Refusal | None:
    job = state.jobs.get(e.job_id)
    if job is None:
        return None if e.job_id in state.retired else Refusal(Reason.CONTRADICTS_STATE, f"no job {e.job_id!r}")
    if e.attempt != job.attempt or job.state not in _RUNS:
        return None  # a report about another attempt, or a job no longer placed: stale, ignored
    where = {worker: node for worker, node, _ in job.assignments}
    if e.worker not in where:
        return Refusal(Reason.CONTRADICTS_STATE, f"{e.job_id} attempt {e.attempt} has no worker {e.worker} "
                                                 f"(workers 0..{len(where) - 1})")
    if where[e.worker] != e.node:
        return Refusal(Reason.CONTRADICTS_STATE, f"{e.job_id} worker {e.worker} runs on {where[e.worker]}, "
                                                 f"not on {e.node}")
    return None


def _checkpoint(state, e: m.CheckpointCompleted) -> Refusal | None:
    job = state.jobs.get(e.job_id)
    if job is None:
        return None if e.job_id in state.retired else Refusal(Reason.CONTRADICTS_STATE, f"no job {e.job_id!r}")
    # A checkpoint of an attempt that ended (the job succeeded while it checkpointed) is late, as one of a retired
    # job is: the fold ignores both.
    if e.attempt == job.attempt and not job.ended and not job.started_workers and job.state not in (
            JobState.RUNNING, JobState.PREEMPTING):
        return Refusal(Reason.CONTRADICTS_STATE, f"{e.job_id} attempt {e.attempt} never ran: nothing to checkpoint")
    if e.progress_ms < 0:
        return Refusal(Reason.CONTRADICTS_STATE, f"negative progress {e.progress_ms}")
    return None


def _node_fact(state, e) -> Refusal | None:
    if e.node not in state.cluster.nodes:
        return Refusal(Reason.CONTRADICTS_STATE, f"no node {_short(e.node)!r} in the cell")
    return None


_CHECKS: dict[type, Callable[..., Refusal | None]] = {
    m.CellConfigured: _configured,
    m.Tick: _tick,
    m.JobSubmitted: _submitted,
    m.NodeRegistered: _registered,
    m.WorkerStarted: _worker_fact,
    m.WorkerExited: _worker_fact,
    m.CheckpointCompleted: _checkpoint,
    m.GpuErrorReported: _node_fact,
    m.NodeHealthCheckPassed: _node_fact,
    m.NodeCordoned: _node_fact,
    m.NodeUncordoned: _node_fact,
}


#: The preemption rules a team may set, per field of TeamDefined (Kueue's ClusterQueue `preemption`).
_RULE = m.PreemptionRule
TEAM_RULES = {
    "within_team": (_RULE.NEVER, _RULE.LOWER_PRIORITY, _RULE.LOWER_OR_NEWER_EQUAL_PRIORITY),
    "reclaim_within_cohort": (_RULE.NEVER, _RULE.LOWER_PRIORITY, _RULE.ANY),
    "borrow_within_cohort": (_RULE.NEVER, _RULE.LOWER_PRIORITY),
}


def team_problem(e: m.TeamDefined) -> str | None:
    """What makes a team definition invalid (the fold ignores it, the admitter rejects it), or None."""
    for name, allowed in TEAM_RULES.items():
        rule = getattr(e, name)
        if rule is not None and rule not in allowed:
            return f"{name} may be {', '.join(r.value for r in allowed)}, not {rule.value}"
    if e.reclaim_within_cohort is _RULE.NEVER and e.borrow_within_cohort not in (None, _RULE.NEVER):
        return "borrow_within_cohort needs reclaim_within_cohort: with Never no victim is ever taken in the cohort"
    return None


def request_problem(e: m.JobSubmitted, limits: Limits) -> tuple[Reason, str] | None:
    """What makes a submission unrunnable whatever the cell holds (the admitter rejects it; the fold never
    queues it), or None."""
    if not e.job_id.strip():
        return Reason.INVALID_REQUEST, "job_id is empty: no command, agent or audit could name the job"
    if e.workers < 1 or e.gpus_per_worker < 1:
        return Reason.NO_GPUS_REQUESTED, f"asks for {e.workers} workers x {e.gpus_per_worker} GPUs"
    if e.workers > limits.max_workers:
        return Reason.LARGER_THAN_CELL, f"{e.workers} workers, a gang has at most {limits.max_workers}"
    if e.gpus_per_worker > limits.max_gpus_per_node:
        return Reason.LARGER_THAN_NODE, f"{e.gpus_per_worker} GPUs per worker, a node has at most {limits.max_gpus_per_node}"
    if e.min_workers is not None and not 1 <= e.min_workers <= e.workers:
        return Reason.INVALID_REQUEST, f"min_workers {e.min_workers} is not within 1..{e.workers}"
    if e.time_limit_ms is not None and not 0 < e.time_limit_ms <= LATEST_MS:
        return Reason.INVALID_REQUEST, f"time_limit_ms {e.time_limit_ms} is not within 1..{LATEST_MS}"
    if e.max_restarts < 0:
        return Reason.INVALID_REQUEST, f"max_restarts {e.max_restarts} is negative"
    return None
