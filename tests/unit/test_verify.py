"""`verify` replays each service as the replica its Kafka shell runs, and must notice tampering.

The in-memory runner runs the same replicas on one ordered log, so on its logs every service
reproduces every decision it wrote, and nothing else."""

from pathlib import Path

import fastavro
import pytest

from events import models as m
from events.logfile import read_log_file
from replay import cli
from replay.scenario.play import load, run
from replay.verify import verify, verify_all
from services.deciders import DECIDERS

SCENARIO_DIR = Path(__file__).resolve().parents[1] / "scenarios"
SCENARIOS = sorted(SCENARIO_DIR.glob("*.yaml"))


def logged(path: Path):
    outcome = run(load(path))
    return list(enumerate(outcome.cell.log)), outcome.cell.policy, outcome.cell.state


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_every_service_reproduces_its_decisions_from_the_log(path):
    log, _, _ = logged(path)
    for name, decider in sorted(DECIDERS.items()):
        verdict = verify(log, decider())  # each decision under the policy it records
        assert verdict.ok, verdict
        assert verdict.reproduced == sum(1 for _, e in log if e.is_decision and e.envelope.producer == name)


def landing_later(events: list[m.Event]) -> list[m.Event]:
    """The log with each decision that an input follows moved after that input: in flight while it is read, as
    on Kafka, where a decision lands a transaction later."""
    out, i = list(events), 0
    while i < len(out) - 1:
        if out[i].is_decision and not out[i + 1].is_decision:
            out[i], out[i + 1] = out[i + 1], out[i]
            i += 2
        else:
            i += 1
    return out


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_the_services_verified_over_one_fold_find_what_each_finds_alone(path):
    """`gangway verify` folds the log once for all four services (their replicas share the state, each laying its
    decisions in flight only while it decides); each verdict, divergences included, is the one the service's own
    replica finds: on the log as played, with one placement altered, and with decisions landing a record later."""
    events = run(load(path)).cell.log
    altered_log = list(enumerate(events))
    placed = next(((i, e) for i, e in altered_log if isinstance(e, m.JobPlaced)), None)
    if placed is not None:
        altered_log[placed[0]] = (placed[0], placed[1].model_copy(update={"domain": "elsewhere"}))
    for log in (list(enumerate(events)), altered_log, list(enumerate(landing_later(events)))):
        together = verify_all(log, [decider() for _, decider in sorted(DECIDERS.items())])
        assert together == [verify(log, decider()) for _, decider in sorted(DECIDERS.items())]
    together = verify_all(altered_log, [decider() for _, decider in sorted(DECIDERS.items())])
    assert [v.ok for v in together] == ([placed[1].envelope.producer != v.service for v in together]
                                        if placed is not None else [True] * 4)


class _AlwaysAsked:
    """A decider asked on every trigger, which notes each event its `only_if` would have spared and what it decided."""

    def __init__(self, decider):
        self.decider, self.spared = decider, []
        self.name, self.triggers, self.side_input = decider.name, decider.triggers, decider.side_input
        self.answers_refusals, self.only_if = decider.answers_refusals, {}

    def decide(self, state, event, ctx):
        worth = self.decider.only_if.get(type(event))
        spared = worth is not None and not worth(state, event)  # on the state the replica would have tested
        decisions = self.decider.decide(state, event, ctx)
        if spared:
            self.spared.append((event.event_type, decisions))
        return decisions


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_a_trigger_is_spared_only_where_its_decider_decides_nothing(path):
    log, _, _ = logged(path)
    for decider in DECIDERS.values():
        asked = _AlwaysAsked(decider())
        assert verify(log, asked).ok
        assert all(decisions == [] for _, decisions in asked.spared), asked.spared


def test_a_tampered_placement_is_reported_as_different():
    log, policy, _ = logged(next(p for p in SCENARIOS if p.stem == "demo"))
    i, placed = next((i, e) for i, e in log if isinstance(e, m.JobPlaced))
    moved = placed.model_copy(update={"assignments": [a.model_copy(update={"gpus": [7 - g for g in a.gpus]})
                                                      for a in placed.assignments]})
    log[i] = (i, moved)
    verdict = verify(log, DECIDERS[placed.envelope.producer](), policy)
    assert verdict.different == [placed.envelope.event_id]


def test_a_decision_nobody_made_is_reported_as_missing():
    log, policy, _ = logged(next(p for p in SCENARIOS if p.stem == "demo"))
    forged = m.JobRejected(envelope=m.Envelope(event_id="admitter-999999-1", cell="demo", at=0, producer="admitter",
                                               basis_offset=999999), job_id="nobody", detail="forged")
    verdict = verify([*log, (len(log), forged)], DECIDERS["admitter"](), policy)
    assert verdict.missing == ["admitter-999999-1"]


# --- exported logs: golden files, and files altered by hand ---------------------------------------------------------

GOLDEN = sorted((Path(__file__).resolve().parents[1] / "golden").glob("*.avro"))
#: Logs written under earlier policy versions: they verify under the policy each decision names.
EARLIER_GOLDEN = sorted((Path(__file__).resolve().parents[1] / "golden").glob("*/*.avro"))


@pytest.mark.parametrize("path", GOLDEN + EARLIER_GOLDEN,
                         ids=[p.stem for p in GOLDEN] + [f"{p.parent.name}/{p.stem}" for p in EARLIER_GOLDEN])
def test_every_golden_log_still_verifies(path, capsys):
    assert cli.main(["verify", "--log", str(path)]) == 0
    assert "every decision reproduced" in capsys.readouterr().out


def test_golden_logs_are_the_scenarios_they_were_exported_from():
    """The golden logs are what the scenarios play today; a deliberate change of behaviour rewrites them."""
    for path in GOLDEN:
        assert read_log_file(path).records == list(enumerate(run(load(SCENARIO_DIR / f"{path.stem}.yaml")).cell.log)), \
            f"{path.name} differs from its scenario: see tests/golden/README.md"


def altered(source: Path, target: Path, change) -> Path:
    """The exported log at `source`, edited record by record with fastavro (as anyone could) and written to `target`,
    its header's count of records and last offset made to match (else reading it refuses it as cut short)."""
    with open(source, "rb") as handle:
        reader = fastavro.reader(handle)
        schema, metadata, rows = reader.writer_schema, dict(reader.metadata), list(reader)
    rows = change(rows)
    metadata.update({"gangway.records": str(len(rows)), "gangway.last_offset": str(rows[-1]["offset"])})
    with open(target, "wb") as out:
        fastavro.writer(out, schema, rows, codec="deflate",
                        metadata={k: v for k, v in metadata.items() if not k.startswith("avro.")})
    return target


def first(rows, field: str) -> int:
    return next(i for i, row in enumerate(rows) if field in row["event"])


def drop_admission(rows):
    return [row for i, row in enumerate(rows) if i != first(rows, "borrowed")]


def more_gpus(rows):
    rows[first(rows, "borrowed")]["event"]["gpus"] += 8
    return rows


def swap_submissions(rows):
    a, b = [i for i, row in enumerate(rows) if "gpus_per_worker" in row["event"]][:2]
    rows[a]["event"], rows[b]["event"] = rows[b]["event"], rows[a]["event"]  # offsets stay where they were
    return rows


@pytest.mark.parametrize("change, kind, basis_type", [
    (drop_admission, "extra", "JobSubmitted"),
    (more_gpus, "different", "JobSubmitted"),
    (swap_submissions, "different", "JobSubmitted"),
])
def test_a_log_altered_by_hand_fails_and_shows_the_first_divergence(tmp_path, capsys, change, kind, basis_type):
    source = next(p for p in GOLDEN if p.stem == "demo")
    path = altered(source, tmp_path / "altered.avro", change)
    assert cli.main(["verify", "--log", str(path)]) == 1
    out = capsys.readouterr().out
    assert "some decisions were not reproduced" in out
    head = out[out.index("first divergence:"):].splitlines()
    assert head[0].startswith("first divergence: admitter decision admitter-") and head[0].endswith(f"({kind})")
    assert head[1].startswith("  basis: offset ") and basis_type in head[1]
    assert head[2].startswith("  recorded (") and head[3].startswith("  replayed: ")
    if kind == "different":
        assert head[4].startswith("  fields that differ: ")


def test_records_moved_with_their_offsets_are_refused_as_read(tmp_path, capsys):
    def swap(rows):
        rows[20], rows[30] = rows[30], rows[20]
        return rows
    path = altered(next(p for p in GOLDEN if p.stem == "demo"), tmp_path / "moved.avro", swap)
    assert cli.main(["verify", "--log", str(path)]) == 1
    assert "the log's order was altered" in capsys.readouterr().err


def test_the_first_divergence_is_the_earliest_by_basis():
    log, policy, _ = logged(next(p for p in SCENARIOS if p.stem == "demo"))
    placements = [(i, e) for i, e in log if isinstance(e, m.JobPlaced)][:2]
    for i, placed in placements:
        log[i] = (i, placed.model_copy(update={"domain": "elsewhere"}))
    verdict = verify(log, DECIDERS["admitter"](), policy)  # the admitter binds what it admits
    assert [d.event_id for d in verdict.divergences] == [e.envelope.event_id for _, e in placements]
    assert verdict.first.recorded.domain == "elsewhere" and verdict.first.replayed.domain == placements[0][1].domain
    assert verdict.first.differing_fields() == ["domain"]
