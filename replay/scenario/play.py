"""Scenario files: load and validate one, build its configuration and timed inputs, run them on a
VirtualCell with SimulatedAgents, and check its expectations. The format is in docs/scenarios.md."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from events import models as m
from events import yamlfile
from replay.runner import Observer, VirtualCell
from replay.scenario.expect import Result, check
from replay.scenario.inputs import apply
from replay.scenario.spec import Generator, NodeSpec, Scenario
from services.agent.simulated import AgentTiming, SimulatedAgents
from services.policies import GANGWAY, overridden


class ScenarioError(ValueError):
    """A scenario file that cannot be used; the message names the file and each bad field."""


def load(path: str | Path) -> Scenario:
    source = str(path)
    try:
        data = yamlfile.load(Path(path).read_text())
    except OSError as error:
        raise ScenarioError(f"{source}: cannot read: {error.strerror or error}") from error
    except UnicodeDecodeError as error:
        raise ScenarioError(f"{source}: not text (UTF-8): byte {error.start} is {error.object[error.start]:#04x}") \
            from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        at = f" (line {mark.line + 1})" if mark is not None else ""
        raise ScenarioError(f"{source}: not valid YAML{at}: {getattr(error, 'problem', error)}") from None
    return parse(data, source)


def parse(data: Any, source: str = "<scenario>") -> Scenario:
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: a scenario is a mapping with name, cell, until, inputs and expect")
    try:
        return Scenario.model_validate(data)
    except ValidationError as error:
        lines = [f"{source}: {_where(e['loc'])}: {_message(e)}" for e in error.errors()]
        raise ScenarioError("\n".join(lines)) from None


def _where(loc: tuple) -> str:
    out = ""
    for i, part in enumerate(loc):
        if isinstance(part, int):
            out += f"[{part}]"
        elif i >= 2 and loc[i - 2] == "nodes" and isinstance(loc[i - 1], int) and part in ("node", "generate"):
            continue  # the tag of a node entry, not a field
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _message(error: dict) -> str:
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        return "unknown field (misspelt?)"
    return message


# --- configuration -------------------------------------------------------------------------


def nodes(scenario: Scenario) -> list[NodeSpec]:
    """Every node of the cell, generators expanded; racks and blocks are numbered across generators."""
    levels = scenario.cell.topology
    if len(levels) > 2 and any(isinstance(e, Generator) for e in scenario.cell.nodes):
        raise ScenarioError(f"generate supports at most two topology levels, the cell has {levels}")
    out: list[NodeSpec] = []
    racks = blocks = 0
    names: dict[str, int] = {}  # prefix -> next node number
    for entry in scenario.cell.nodes:
        if isinstance(entry, NodeSpec):
            out.append(entry)
            continue
        spec = entry.generate
        for i in range(spec.count):
            rack, slot = divmod(i, spec.nodes_per_rack)
            rack_size = min(spec.nodes_per_rack, spec.count - rack * spec.nodes_per_rack)
            domains = [blocks + rack // spec.racks_per_block, racks + rack][2 - len(levels):]
            number = names.get(spec.prefix, 0)
            names[spec.prefix] = number + 1
            out.append(NodeSpec(name=f"{spec.prefix}{number}", gpus=spec.gpus, gpu_type=spec.gpu_type,
                                labels={level: f"{level[0]}{d}" for level, d in zip(levels, domains)},
                                spare=spec.spare or slot >= rack_size - spec.spares_per_rack))
        rack_count = -(-spec.count // spec.nodes_per_rack)
        racks += rack_count
        blocks += -(-rack_count // spec.racks_per_block)
    return out


def configuration(scenario: Scenario, cell: VirtualCell) -> list[m.Event]:
    """The operator's events at time 0: topology, priority classes, cohorts, teams, quotas, nodes."""
    def env() -> m.Envelope:
        return cell.envelope(0, "operator")

    events: list[m.Event] = [m.CellConfigured(envelope=env(), topology_levels=list(scenario.cell.topology))]
    events += [m.PriorityClassDefined(envelope=env(), name=p.name, value=p.value, preemptible=p.preemptible)
               for p in scenario.priority_classes]
    events += [m.CohortDefined(envelope=env(), cohort=c.name, parent=c.parent) for c in scenario.cohorts]
    for team in scenario.teams:
        events.append(m.TeamDefined(envelope=env(), team=team.name, cohort=team.cohort,
                                    weight_milli=round(team.weight * 1000), **team.preemption.model_dump()))
        events += [m.QuotaSet(envelope=env(), team=team.name, gpu_type=gpu_type, nominal=q.nominal,
                              borrowing_limit=q.borrowing_limit, lending_limit=q.lending_limit)
                   for gpu_type, q in team.quota.items()]
    seen: set[str] = set()
    for node in nodes(scenario):
        if node.name in seen:
            raise ScenarioError(f"node {node.name!r} is defined twice")
        seen.add(node.name)
        unknown = sorted(set(node.labels) - set(scenario.cell.topology))
        missing = [lv for lv in scenario.cell.topology if lv not in node.labels]
        if unknown or missing:
            raise ScenarioError(f"node {node.name}: labels must name each topology level {scenario.cell.topology} "
                                f"(unknown: {unknown}, missing: {missing})")
        events.append(m.NodeRegistered(envelope=env(), node=node.name, gpu_type=node.gpu_type, gpus=node.gpus,
                                       labels=dict(node.labels), spare=node.spare))
    return events


# --- running -------------------------------------------------------------------------------


@dataclass
class Outcome:
    """A finished run: the cell (its log and state) and each expectation's result."""

    scenario: Scenario
    source: str
    cell: VirtualCell
    results: list[Result] = field(default_factory=list)

    @property
    def unmet(self) -> list[Result]:
        return [r for r in self.results if not r.met]


def build(scenario: Scenario) -> tuple[VirtualCell, SimulatedAgents]:
    """A virtual cell with the scenario's policy and tick, its agents attached, configuration scheduled."""
    try:
        policy = overridden(GANGWAY, scenario.policy)
    except ValueError as error:
        raise ScenarioError(str(error)) from error
    cell = VirtualCell(cell=scenario.name, policy=policy, tick_ms=scenario.tick)
    a = scenario.agents
    agents = SimulatedAgents(AgentTiming(start_delay_ms=a.start_delay, checkpoint_every_ms=a.checkpoint_every,
                                         checkpoint_delay_ms=a.checkpoint_delay, heartbeat_every_ms=a.heartbeat_every))
    cell.observers.append(agents)
    cell.side_observers.append(agents.heard)
    cell.schedule_all(configuration(scenario, cell))
    return cell, agents


def run(scenario: Scenario, source: str = "<scenario>", observers: Iterable[Observer] = ()) -> Outcome:
    """Plays the inputs in time order, checking each expectation once the cell has run to its time."""
    try:
        cell, agents = build(scenario)
    except ScenarioError as error:
        raise ScenarioError(f"{source}: {error}") from None
    cell.observers.extend(observers)
    outcome = Outcome(scenario, source, cell)
    checks: dict[int, list] = {}
    for expect in scenario.expect:
        checks.setdefault(scenario.until if expect.at is None else expect.at, []).append(expect)
    inputs: dict[int, list] = {}
    for item in scenario.inputs:
        inputs.setdefault(item.at, []).append(item)
    for t in sorted(set(inputs) | set(checks) | {scenario.until}):
        if t in inputs:
            cell.run_until(t - 1)  # inputs are resolved against the state just before their time
            for item in inputs[t]:
                apply(item, scenario, cell, agents)
        cell.run_until(t)
        outcome.results += [check(expect, cell) for expect in checks.get(t, ())]
    return outcome


def run_file(path: str | Path, observers: Iterable[Observer] = ()) -> Outcome:
    return run(load(path), str(path), observers)
