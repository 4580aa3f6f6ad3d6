"""Checks one scenario expectation against a cell that has run to the expectation's time."""

from __future__ import annotations

from dataclasses import dataclass

from events import models as m
from replay.runner import VirtualCell
from replay.scenario.spec import Expect


@dataclass(frozen=True)
class Result:
    """Whether an expectation held, and what the cell showed instead when it did not."""

    expect: Expect
    met: bool
    observed: str

    def describe(self) -> str:
        return self.expect.describe()


def check(expect: Expect, cell: VirtualCell) -> Result:
    met, observed = _CHECKS[expect.check](expect, cell)
    return Result(expect, met, observed)


def _job(expect: Expect, cell: VirtualCell):
    return cell.job(expect.job)


def _state(expect: Expect, cell: VirtualCell) -> tuple[bool, str]:
    job = _job(expect, cell)
    if job is None:
        return False, f"job {expect.job} is unknown to the cell"
    return job.state is expect.state, f"job {expect.job} is {job.state.value} (reason {job.reason.value})"


def _reason(expect: Expect, cell: VirtualCell) -> tuple[bool, str]:
    job = _job(expect, cell)
    if job is None:
        return False, f"job {expect.job} is unknown to the cell"
    return job.reason is expect.reason, f"job {expect.job} has reason {job.reason.value} ({job.state.value})"


def _same_domain(expect: Expect, cell: VirtualCell) -> tuple[bool, str]:
    job = _job(expect, cell)
    cluster = cell.state.cluster
    level = cluster.level_index(expect.same_domain)
    if job is None or not job.assignments:
        return False, f"job {expect.job} holds no GPUs"
    if level is None:
        return False, f"the cell has no topology level {expect.same_domain!r}"
    domains = sorted({cluster.domain_of(cluster.nodes[n], level) for n in job.nodes()})
    return len(domains) == 1, f"job {expect.job}'s workers are in {expect.same_domain} {', '.join(domains)}"


def _gpus_in_use(expect: Expect, cell: VirtualCell) -> tuple[bool, str]:
    tenancy = cell.state.tenancy
    types = [expect.gpu_type] if expect.gpu_type else sorted({t for team, t in tenancy.usage if team == expect.team})
    used = sum(tenancy.used(expect.team, t) for t in types)
    return used == expect.gpus_in_use, f"team {expect.team} uses {used} GPUs"


def _logged(cell: VirtualCell, kind: type[m.Event], **fields: object) -> list[m.Event]:
    return [e for e in cell.log if isinstance(e, kind)
            and all(v is None or getattr(e, k, None) == v for k, v in fields.items() if k != "reason")
            and (fields.get("reason") is None or e.envelope.reason is fields["reason"])]


def _preempted(expect: Expect, cell: VirtualCell) -> tuple[bool, str]:
    found = _logged(cell, m.JobPreempted, job_id=expect.job, for_job_id=expect.for_job)
    requested = _logged(cell, m.PreemptionRequested, job_id=expect.job)
    seen = (f"JobPreempted for {', '.join(e.for_job_id for e in found)}" if found else
            f"not preempted ({len(requested)} preemption request(s))")
    return bool(found) == expect.preempted, f"job {expect.job}: {seen}"


def _rejected(expect: Expect, cell: VirtualCell) -> tuple[bool, str]:
    found = _logged(cell, m.JobRejected, job_id=expect.job)
    reasons = [e.envelope.reason.value for e in found]
    job = _job(expect, cell)
    state = job.state.value if job else "unknown"
    return expect.rejected.value in reasons, f"job {expect.job} rejections: {reasons or 'none'} (job is {state})"


def _on_nodes(expect: Expect, cell: VirtualCell) -> tuple[bool, str]:
    job = _job(expect, cell)
    nodes = job.nodes() if job else []
    return nodes == sorted(expect.on_nodes), f"job {expect.job} holds GPUs on {nodes or 'no nodes'}"


def _node_status(node) -> str:
    if node.failed:
        return "failed"
    if node.fault_cordoned:
        return "fault_cordoned"
    if node.cordoned:
        return "cordoned"
    if node.spare:
        return "active_spare" if node.activated else "spare"
    return "healthy"


def _node_state(expect: Expect, cell: VirtualCell) -> tuple[bool, str]:
    node = cell.state.cluster.nodes.get(expect.node)
    if node is None:
        return False, f"node {expect.node} is not registered"
    status = _node_status(node)
    return status == expect.node_state, f"node {expect.node} is {status}"


def _retired(expect: Expect, cell: VirtualCell) -> tuple[bool, str]:
    node = cell.state.cluster.nodes.get(expect.node)
    retired = sorted(node.retired) if node else []
    return retired == sorted(expect.retired_gpus), f"node {expect.node} has retired GPUs {retired}"


def _logged_check(expect: Expect, cell: VirtualCell) -> tuple[bool, str]:
    kind = m.EVENT_TYPES_BY_NAME[expect.logged]
    found = _logged(cell, kind, job_id=expect.job, node=expect.node, reason=expect.reason)
    met = len(found) == expect.count if expect.count is not None else bool(found)
    reasons = sorted({e.envelope.reason.value for e in _logged(cell, kind, job_id=expect.job, node=expect.node)})
    return met, f"{len(found)} matching {expect.logged} (reasons seen: {', '.join(reasons) or 'none'})"


_CHECKS = {
    "state": _state, "reason": _reason, "same_domain": _same_domain, "gpus_in_use": _gpus_in_use,
    "preempted": _preempted, "rejected": _rejected, "on_nodes": _on_nodes, "node_state": _node_state,
    "retired_gpus": _retired, "logged": _logged_check,
}
