"""Plain-JSON rows for a cell's state, one per job, node and heartbeat plus the tenancy and the
cell itself, so a projection store can write just the rows an event batch changed.

`rows(state, keys)` renders rows; `restore(rows)` builds the state back, indexes included.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from events.models import Reason
from projections.cell import CellState
from projections.cluster import Node
from projections.evolve import RETIRED_PER_ROW
from projections.jobs import Checkpoint, Job, JobState
from projections.jsonbytes import dumps
from projections.tenancy import PriorityClass, Quota, Team, TeamPreemption
from projections.validate import Limits

CELL_KEY = "cell"
TENANCY_KEY = "tenancy"


def job_key(job_id: str) -> str:
    return f"job/{job_id}"


def node_key(name: str) -> str:
    return f"node/{name}"


def heartbeat_key(name: str) -> str:
    return f"heartbeat/{name}"


def taken_key(origin: str) -> str:
    return f"taken/{origin}"


def retired_key(row: int) -> str:
    return f"retired/{row:09d}"


def all_keys(state: CellState) -> list[str]:
    rows = -(-len(state.retired_order) // RETIRED_PER_ROW)
    return ([CELL_KEY, TENANCY_KEY] + [job_key(j) for j in sorted(state.jobs)]
            + [node_key(n) for n in sorted(state.cluster.nodes)]
            + [heartbeat_key(n) for n in sorted(state.last_heartbeat)]
            + [taken_key(o) for o in sorted(state.taken)]
            + [retired_key(r) for r in range(rows)])


def rows(state: CellState, keys: Iterable[str]) -> Iterator[tuple[str, bytes | None]]:
    """(key, JSON bytes) for each key; None for a row that no longer exists."""
    for key in keys:
        value = _row(state, key)
        yield key, None if value is None else dumps(value)


def _row(state: CellState, key: str) -> Any:
    kind, _, name = key.partition("/")
    if key == CELL_KEY:
        return {"cell": state.cell, "offset": state.offset, "now": state.now, "clock": state.clock,
                "limits": dataclasses.asdict(state.limits), "levels": list(state.cluster.levels),
                "reservations": {j: list(n) for j, n in sorted(state.reservations.items())},
                "ending": sorted(state.ending), "runtimes": [list(r) for r in state.runtimes],
                "service_sums": list(state.service_sums), "taken_rows": True}
    if key == TENANCY_KEY:
        t = state.tenancy
        return {
            "teams": [[x.name, x.cohort, x.weight_milli, *dataclasses.astuple(x.preemption)]
                      for _, x in sorted(t.teams.items())],
            "cohorts": sorted([c, p] for c, p in t.cohort_parent.items()),
            "quotas": sorted([k[0], k[1], q.nominal, q.borrowing_limit, q.lending_limit] for k, q in t.quotas.items()),
            "priority_classes": [[c.name, c.value, c.preemptible] for _, c in sorted(t.priority_classes.items())],
            "usage": sorted([k[0], k[1], v] for k, v in t.usage.items()),
        }
    if kind == "job":
        job = state.jobs.get(name)
        return None if job is None else _job(job)
    if kind == "taken":
        return state.taken.get(name)
    if kind == "node":
        node = state.cluster.nodes.get(name)
        return None if node is None else _node(node)
    if kind == "heartbeat":
        return state.last_heartbeat.get(name)
    if kind == "retired":  # the ids of ended jobs, a thousand to a row in the order they ended
        row = int(name)
        return state.retired_order[row * RETIRED_PER_ROW:(row + 1) * RETIRED_PER_ROW] or None
    raise KeyError(key)


#: A job row's fields in order, and the types whose values go into it as they are (the most of them): a save writes
#: the row of every job that changed, many a second on a busy cell.
_JOB_FIELDS = tuple(Job.__dataclass_fields__)
_AS_THEY_ARE = frozenset({int, str, bool, type(None), JobState, Reason})
_LISTS = frozenset({"assignments", "held", "history"})


def _job(job: Job) -> dict[str, Any]:
    out = {}
    for name in _JOB_FIELDS:
        value = getattr(job, name)
        if type(value) not in _AS_THEY_ARE or name in _LISTS:
            if isinstance(value, frozenset):
                value = sorted(value)
            elif isinstance(value, Checkpoint):
                value = [value.checkpoint_id, value.progress_ms, value.at]
            elif name in ("assignments", "held"):
                value = [[w, n, list(g)] for w, n, g in value]
            elif isinstance(value, tuple):
                value = list(value)
            elif name == "history":
                value = [list(h) for h in value]
        out[name] = value
    return out


def _node(node: Node) -> dict[str, Any]:
    out = {name: getattr(node, name) for name in Node.__dataclass_fields__}
    out["domains"] = list(node.domains)
    out["retired"] = sorted(node.retired)
    out["holder"] = {str(i): j for i, j in sorted(node.holder.items())}
    out["claimed"] = {str(i): j for i, j in sorted(node.claimed.items())}
    return out


def _restore_node(row: dict[str, Any]) -> Node:
    row = dict(row)
    row["domains"] = tuple(row["domains"])
    row["retired"] = frozenset(row["retired"])
    row["holder"] = {int(i): j for i, j in row["holder"].items()}
    row["claimed"] = {int(i): j for i, j in row.get("claimed", {}).items()}
    return Node(**row)


class OutdatedSnapshot(ValueError):
    """Rows saved by an older Gangway, without something today's fold keeps and cannot recover from the rows (the
    jobs it was learnt from have left the state): only a fold of the whole log gives the state back."""


def restore(stored: Mapping[str, bytes]) -> CellState:
    """A cell state from its rows, with every index rebuilt. Raises OutdatedSnapshot for rows of an older fold."""
    state = CellState()
    cell = json.loads(stored[CELL_KEY])
    if "service_sums" not in cell:
        raise OutdatedSnapshot("its cell row has no service_sums (the succeeded jobs' GPU-time)")
    if "taken_rows" not in cell:
        raise OutdatedSnapshot("it keeps no input offsets taken per origin")
    state.cell, state.offset, state.now, state.clock = cell["cell"], cell["offset"], cell["now"], cell["clock"]
    state.limits = Limits(**cell["limits"])
    state.cluster.levels = tuple(cell["levels"])
    state.reservations = {j: tuple(n) for j, n in cell["reservations"].items()}
    state.ending = set(cell["ending"])
    state.runtimes = [(offset, fraction) for offset, fraction in cell["runtimes"]]
    state.service_sums = tuple(cell["service_sums"])
    tenancy = json.loads(stored[TENANCY_KEY])
    t = state.tenancy
    t.teams = {name: Team(name, cohort, weight, TeamPreemption(*rules))
               for name, cohort, weight, *rules in tenancy["teams"]}
    t.cohort_parent = {c: p for c, p in tenancy["cohorts"]}
    t.quotas = {(team, gpu): Quota(n, b, lend) for team, gpu, n, b, lend in tenancy["quotas"]}
    t.priority_classes = {name: PriorityClass(name, v, p) for name, v, p in tenancy["priority_classes"]}
    t.usage = {(team, gpu): v for team, gpu, v in tenancy["usage"]}
    for key in sorted(stored):
        kind, _, name = key.partition("/")
        if kind == "node":
            state.cluster.nodes[name] = _restore_node(json.loads(stored[key]))
        elif kind == "job":
            job = _restore_job(json.loads(stored[key]))
            state.jobs[name] = job
            state.set_state(job, job.state)
            if job.has_hold:
                state.holds.add(name)
                held = (job.team, job.gpu_type)
                t.held[held] = t.held.get(held, 0) + job.held_quota
        elif kind == "heartbeat":
            state.last_heartbeat[name] = json.loads(stored[key])
        elif kind == "taken":
            state.taken[name] = json.loads(stored[key])
        elif kind == "retired":
            state.retired_order += json.loads(stored[key])
    state.retired = set(state.retired_order)
    state.cluster.reindex()
    return state


def _restore_job(row: dict[str, Any]) -> Job:
    row = dict(row)
    row["state"] = JobState(row["state"])
    row["reason"] = Reason(row["reason"])
    for name in ("started_workers", "succeeded_workers"):
        row[name] = frozenset(row[name])
    row["assignments"] = tuple((w, n, tuple(g)) for w, n, g in row["assignments"])
    row["reserved_nodes"] = tuple(row["reserved_nodes"])
    row["held"] = tuple((w, n, tuple(g)) for w, n, g in row.get("held", ()))
    for name in ("hold_victims", "yielded_to"):
        row[name] = tuple(row.get(name, ()))
    row["checkpoint"] = Checkpoint(*row["checkpoint"]) if row["checkpoint"] else None
    row["history"] = [tuple(h) for h in row["history"]]
    return Job(**row)


def dump(state: CellState) -> dict[str, Any]:
    """Every row of the state as plain data: two states are the same projection when these are equal."""
    return {key: json.loads(value) for key, value in rows(state, all_keys(state)) if value is not None}
