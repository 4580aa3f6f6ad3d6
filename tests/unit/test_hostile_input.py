"""Input a user can get wrong, or craft: each gets one clear line and a non-zero exit, never a traceback or a run
that does not end (found by a sweep of the commands with bad numbers, paths, files and hand-made logs)."""

from pathlib import Path

import fastavro
import pytest

from events import models as m
from events.launcher.spec import SpecError, load_documents
from events.traces import itp_jobs, read_jobs, read_nodes
from replay.cli import build_parser, main
from replay.runner import VirtualCell
from replay.sim.workload import SimConfig, build_workload, resolve_gpus
from services.policies import UnknownPolicy, resolve
from tests.builders import env, fold, job, node, quota, team, tick, topology

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "demo.yaml"


def refused(capsys, *argv: str) -> tuple[int, str]:
    """Runs `gangway argv`; the exit code and the last line of stderr. argparse's refusals exit 2."""
    try:
        code = main(list(argv))
    except SystemExit as exit_:
        code = exit_.code
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err.strip().splitlines()[-1]


SIM = ["sim", "--trace", "t.csv", "--gpus", "8"]


@pytest.mark.parametrize("argv, complaint", [
    ([*SIM, "--tick-s", "-60"], "argument --tick-s: -60 is not more than 0"),  # it looped for ever
    ([*SIM, "--tick-s", "0"], "argument --tick-s: 0 is not more than 0"),
    ([*SIM, "--checkpoint-every-min", "-1"], "argument --checkpoint-every-min: -1 is not at least 0"),
    ([*SIM, "--checkpoint-every-min", "nan"], "argument --checkpoint-every-min: nan is not a finite number"),
    ([*SIM, "--failures-per-1000-gpu-days", "inf"],
     "argument --failures-per-1000-gpu-days: inf is not a finite number"),
    ([*SIM, "--gpus-per-node", "0"], "argument --gpus-per-node: 0 is not more than 0"),
    ([*SIM, "--limit", "-5"], "argument --limit: -5 is not more than 0"),
    ([*SIM, "--max-restarts", "-1"], "argument --max-restarts: -1 is not at least 0"),
    ([*SIM, "--time-limit-factor", "-1"], "argument --time-limit-factor: -1 is not at least 0"),
    (["demo", "--speedup", "0"], "argument --speedup: 0 is not more than 0 and at most 30"),
    (["demo", "--speedup", "31"], "argument --speedup: 31 is not more than 0 and at most 30"),
    (["demo", "--nodes", "0"], "argument --nodes: 0 is not at least 1"),
    (["demo", "--duration", "fast"], "argument --duration: 'fast' is not a number"),
    (["demo", "--node-failure-at", "-1"], "argument --node-failure-at: -1 is not at least 0"),
    (["fleet", "--nodes", "-1"], "argument --nodes: -1 is not at least 1"),
    (["run", "all", "--tick-interval", "0"], "argument --tick-interval: 0 is not more than 0"),
    (["submit", "j.yaml", "--wait", "--timeout", "nan"], "argument --timeout: nan is not a finite number"),  # hung
    (["submit", "j.yaml", "--wait", "--timeout", "-1"], "argument --timeout: -1 is not more than 0"),
    (["topics", "--timeout", "inf"], "argument --timeout: inf is not a finite number"),
    (["run", "all", "--epoch", "nan"], "argument --epoch: nan is not a finite number"),
    (["agent", "--node", "n1", "--epoch", "-5"], "argument --epoch: -5 is not at least 0"),
    (["load", "--max-gpus", "0"], "argument --max-gpus: 0 is not more than 0"),
    (["load", "--start", "-1"], "argument --start: -1 is not at least 0"),
    (["projection", "rebuild", "--to-offset", "-1"], "argument --to-offset: -1 is not at least 0"),
])
def test_numbers_a_command_cannot_run_with_are_refused_in_one_line(argv, complaint, capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser(argv[0]).parse_args(argv)
    assert exit_.value.code == 2 and complaint in capsys.readouterr().err


@pytest.mark.parametrize("gpus, complaint", [("0", "a cell needs at least one GPU"), ("-3", "at least one GPU"),
                                             ("99999999999999999999", "more than the 1,000,000 a simulated cell"),
                                             ("infx", "a factor of the average demand"), ("0x", "such as 1.2x"),
                                             ("many", "give a number of GPUs")])
def test_a_cell_size_that_is_no_size_is_refused(gpus, complaint):
    with pytest.raises(ValueError, match=complaint):
        resolve_gpus(gpus, [])


def test_outputs_that_cannot_be_written_are_refused_before_the_work(tmp_path, capsys):
    log = str(GOLDEN / "demo.avro")
    code, line = refused(capsys, "log", "export", "--log", log, "--out", str(tmp_path))
    assert code == 2 and "is a directory" in line
    code, line = refused(capsys, "log", "export", "--log", log, "--out", str(tmp_path / "missing" / "x.avro"))
    assert code == 1 and line.endswith("x.avro: No such file or directory")
    code, line = refused(capsys, "scenario", "run", str(SCENARIO), "--export-log", str(tmp_path))
    assert code == 2 and "is a directory" in line
    (tmp_path / "file").write_text("")
    code, line = refused(capsys, "sim", "--trace", "t.csv", "--gpus", "8", "--report", str(tmp_path / "file"))
    assert code == 2 and "exists and is not a directory" in line


def test_an_empty_window_is_refused(capsys):
    log = str(GOLDEN / "reclaim_within_cohort.avro")
    code, line = refused(capsys, "report", "--log", log, "--from", "500", "--to", "100")
    assert code == 1 and line == f"gangway report: no records of {log} from 500 to 100"
    code, line = refused(capsys, "report", "--log", log, "--from", "9999-01-01T00:00Z")
    assert code == 1 and "no records" in line
    code, line = refused(capsys, "whatif", "--policy", "fifo", "--log", log, "--from", "500", "--to", "100")
    assert code == 1 and line == "gangway whatif: --from 500 is after --to 100: nothing to re-drive"


def test_a_log_exported_from_a_later_offset_is_no_log_to_audit(tmp_path, capsys):
    part = tmp_path / "part.avro"
    assert main(["log", "export", "--log", str(GOLDEN / "demo.avro"), "--from", "200", "--out", str(part)]) == 0
    code, line = refused(capsys, "replay", "state", "--at", "300", "--log", str(part))
    assert code == 1 and "holds the log from offset 200 only (exported with --from)" in line


def restamped(tmp_path: Path, at: int) -> Path:
    """The golden demo log with its first Tick stamped `at`, edited with fastavro as anyone could."""
    with open(GOLDEN / "demo.avro", "rb") as handle:
        reader = fastavro.reader(handle)
        schema, metadata, rows = reader.writer_schema, dict(reader.metadata), list(reader)
    tick = next(row for row in rows if row["event"].keys() == {"envelope"})
    tick["event"]["envelope"]["at"] = at
    target = tmp_path / f"at-{at}.avro"
    with open(target, "wb") as out:
        fastavro.writer(out, schema, rows, codec="deflate",
                        metadata={k: v for k, v in metadata.items() if not k.startswith("avro.")})
    return target


@pytest.mark.parametrize("at", [2**63 - 1, -(2**63 - 1), 2**62])
def test_a_record_stamped_beyond_any_calendar_neither_hangs_nor_breaks_the_audits(at, tmp_path, capsys):
    path = str(restamped(tmp_path, at))
    assert main(["whatif", "--policy", "fifo", "--log", path]) == 0  # it stepped time towards 2^63 for ever
    assert main(["report", "--log", path]) == 0
    assert main(["replay", "state", "--at", "5", "--log", path]) == 0
    assert "Traceback" not in capsys.readouterr().err


def test_a_file_that_is_not_text_is_refused_with_the_byte(tmp_path, capsys):
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00name: x\n")
    code, line = refused(capsys, "scenario", "run", str(binary))
    assert code == 2 and line == f"INVALID {binary}: not text (UTF-8): byte 0 is 0xff"
    with pytest.raises(SpecError, match="not text"):
        load_documents(binary)


def test_a_key_given_twice_is_refused_not_the_last_taken(tmp_path, capsys):
    """PyYAML lets the last of a repeated key win: a job submitted under its second name, a quota's second value."""
    job = tmp_path / "job.yaml"
    job.write_text("kind: Job\nmetadata: {name: first, team: nlp}\nmetadata: {name: second, team: nlp}\n"
                   "spec: {workers: 1, gpus_per_worker: 1, gpu_type: H100, command: [x]}\n")
    with pytest.raises(SpecError, match="line 3.*the key 'metadata' appears twice"):
        load_documents(job)
    team = tmp_path / "team.yaml"
    team.write_text("kind: Team\nmetadata: {name: nlp}\nspec:\n  quotas: {H100: 16, H100: 2}\n")
    with pytest.raises(SpecError, match="the key 'H100' appears twice"):
        load_documents(team)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO.read_text().replace("name: demo", "name: demo\nname: other", 1))
    code, line = refused(capsys, "scenario", "run", str(scenario))
    assert code == 2 and "the key 'name' appears twice" in line
    merged = tmp_path / "merged.yaml"  # a merge key's keys may be given again: that is what it is for
    merged.write_text("kind: Team\nmetadata:\n  <<: {name: nlp}\n  name: cv\n")
    assert [d.name for d in load_documents(merged)] == ["cv"]


@pytest.mark.parametrize("old, new, complaint", [
    ("- {name: nlp, ", "- {name: nlp, weight: .inf, ", "teams[0].weight: Input should be a finite number"),  # traceback
    ("count: 8,", "count: 100000000,", "generate.count: Input should be less than or equal to 100000"),  # 2 GB and on
    ("until: 20m", "until: 100000000d", "until: 2400000000h is longer than a scenario may run (8784h)"),  # 1 GB and on
])
def test_a_scenario_too_big_to_play_or_with_no_number_is_refused(old, new, complaint, tmp_path, capsys):
    source = (SCENARIO.parent / "lending_limit_lowered_keeps_the_guaranteed_part.yaml").read_text()
    assert old in source
    scenario = tmp_path / "s.yaml"
    scenario.write_text(source.replace(old, new, 1))
    code, line = refused(capsys, "scenario", "run", str(scenario))
    assert code == 2 and complaint in line


@pytest.mark.parametrize("version, complaint", [
    ("gangway-3+recovery.heartbeat_timeout_ms=-5", "heartbeat_timeout_ms must not be negative"),
    ("gangway-3+recovery.heartbeat_timeout_ms=true", "heartbeat_timeout_ms must be a duration, not true"),
    ("gangway-3+recovery.heartbeat_timeout_ms=0", "heartbeat_timeout_ms must be more than 0"),
    ("gangway-3+admission.max_reservations=-3", "max_reservations must not be negative"),
    ("gangway-3+admission.admissions_per_team_per_cycle=0", "admissions_per_team_per_cycle must be at least 1"),
    ("gangway-3+recovery.mass_silence_percent=500", "mass_silence_percent must be between 0 and 100"),
    ('gangway+admission.big_gangs_reserve_after_ms="367d"', "big_gangs_reserve_after_ms must be at most 366 days"),
    ("gangway+admission.big_gangs_reserve_after_ms=10000000000000000000000", "must be at most 366 days"),
    ("gangway+admission.big_gangs_reserve_after_ms=-1", "big_gangs_reserve_after_ms must not be negative"),
    ("gangway+admission.big_gangs_reserve_on_known_drain=1", "big_gangs_reserve_on_known_drain must be true or false"),
])
def test_policy_knobs_out_of_range_are_refused(version, complaint):
    with pytest.raises(UnknownPolicy, match=complaint):
        resolve(version)
    assert resolve("gangway-3+preemption.max_priority_threshold=-5").preemption.max_priority_threshold == -5
    assert resolve('gangway+admission.big_gangs_reserve_after_ms="366d"').admission.big_gangs_reserve_after_ms == \
        366 * 86_400_000


@pytest.mark.parametrize("knob", ['admission.big_gangs_reserve_after_ms="X"', 'admission.X=1', 'X.y=1', 'X'])
def test_a_long_bad_policy_is_refused_in_a_short_message(knob):
    """A recorded policy version comes off the log: however long, the refusal quotes it cut short."""
    with pytest.raises(UnknownPolicy) as refused:
        resolve(f"gangway+{knob.replace('X', 'x' * 100_000)}")
    assert len(str(refused.value)) < 1_000


@pytest.mark.parametrize("content, complaint", [
    ("job_id,submission_time,duration,num_gpu\nx,abc,10,1\n", "line 2: submission_time 'abc' is not a number"),
    ("job_id,submission_time,duration,num_gpu\nx,0,nan,1\n", "line 2: duration 'nan' is not a number"),
    ("job_id,submission_time,duration,num_gpu\nx,0,10,1\ny,5,10,-4\n", "line 3: num_gpu '-4' is not a number"),
    ("job_id,submission_time,duration,num_gpu\nx,0,10,1.5\n", "line 2: num_gpu '1.5' is not a whole number"),
    ("job_id,submission_time,duration,num_gpu\nx,0,10,0.5\n", "line 2: num_gpu '0.5' is not a whole number"),
    ("job_id,submission_time,duration,num_gpu\nx,0,10,1e30\n", "line 2: num_gpu '1e30' is not a number of at least 0"),
])
def test_a_trace_row_that_is_no_job_is_refused_with_its_file_and_line(content, complaint, tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text(content)
    with pytest.raises(ValueError, match=complaint):
        read_jobs([trace])
    binary = tmp_path / "b.csv"
    binary.write_bytes(b"\xff\xfe")
    with pytest.raises(ValueError, match="not text"):
        read_jobs([binary])


def test_an_itp_folder_without_traces_is_refused_not_read_as_no_jobs(tmp_path):
    """A benchmark run from a checkout without the traces beside it timed zero gangs and printed 0 placed/s."""
    with pytest.raises(FileNotFoundError, match="no ITP trace at"):
        itp_jobs(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="no ITP trace at"):
        itp_jobs(tmp_path)


def test_a_trace_beyond_any_cell_s_time_is_refused_before_the_run(tmp_path):
    """A submission at 10^15 s ticked the cell towards it for ever."""
    trace = tmp_path / "far.csv"
    trace.write_text("job_id,submission_time,duration,num_gpu\na,0,100,1\nb,1000000000000000,100,1\n")
    with pytest.raises(ValueError, match="beyond the 4,102,444,800 s a cell's time holds"):
        build_workload([trace], SimConfig(gpus=8))


def test_a_node_list_without_gpu_nodes_or_with_negative_gpus_is_refused(tmp_path):
    listed = tmp_path / "nodes.csv"
    listed.write_text("sn,gpu,model\na,0,V100\n")
    with pytest.raises(ValueError, match="lists no node with GPUs"):
        read_nodes(listed)
    listed.write_text("sn,gpu,model\na,-8,V100\n")
    with pytest.raises(ValueError, match="line 2: gpu '-8'"):
        read_nodes(listed)


def test_a_long_running_command_without_a_broker_says_so_and_exits(capsys):
    """It waited on the broker out of reach of Ctrl-C (`run all` printed a TimeoutError and went on)."""
    code, line = refused(capsys, "fleet", "--nodes", "4", "--bootstrap-servers", "127.0.0.1:1")
    assert code == 1 and line.startswith("gangway fleet: no Kafka broker answers at 127.0.0.1:1")


def test_an_audit_of_a_live_cell_without_a_broker_says_so_in_one_line(capsys):
    code, line = refused(capsys, "replay", "state", "--at", "5", "--cell", "cell-a",
                         "--bootstrap-servers", "127.0.0.1:1")
    assert code == 1 and line.startswith("gangway replay state: no Kafka broker answers at 127.0.0.1:1")
    assert line.endswith("or read an exported log with --log FILE)")


@pytest.mark.parametrize("named, kept", [(["nope"], None), (["n2", "nope", "x" * 300, "n2"], ("n2",))])
def test_a_reservation_naming_nodes_the_cell_lacks_reserves_only_the_cell_s_own(named, kept):
    """Another writer's JobQueued may name nodes the cell does not have, or one twice: the fold reserves the cell's
    own nodes, each once. A node it lacks would never drain nor be planned again, and the gang holding it would
    never reserve nodes that do."""
    cell = VirtualCell(cell="test-cell")
    for event in (topology("rack"), node("n1"), node("n2"), team("nlp"), quota("nlp", 100), tick(0),
                  job("r1", workers=2, gpus=8, at=1), job("big", workers=2, gpus=8, at=2)):
        cell.append(event)
    forged = env(3, "admitter", "forged").model_copy(update={"reason": m.Reason.HOLDS_RESERVATION})
    cell.append(m.JobQueued(envelope=forged, job_id="big", team="nlp", reserved_nodes=named))
    assert cell.state.reservations.get("big") == kept
    assert cell.state.jobs["big"].reserved_nodes == (kept or ())
    assert [n for n, node_ in sorted(cell.state.cluster.nodes.items()) if node_.reserved_for == "big"] == list(kept or [])


@pytest.mark.parametrize("blank", ["", " ", "   "])
def test_a_submission_without_a_job_id_is_rejected_and_never_runs(blank):
    cell = fold(node("n1"), team("nlp"), quota("nlp", 8), job(blank, gpus=8), tick(60_000))
    decided = [(type(e).__name__, e.envelope.reason.value) for e in cell.log
               if isinstance(e, m.Decision) and getattr(e, "job_id", None) == blank]
    assert decided == [("JobRejected", "INVALID_REQUEST")]
    assert blank not in cell.state.queued


@pytest.mark.parametrize("job_id, held", [
    ("victim\x00zzz", "U+0000"),  # NUL separates the read model's key parts: it read as job victim's rows
    ("a\x1b[2Jb", "U+001B"),  # an escape sequence: it would clear the terminal of whoever explains the job
    ("\tjob", "U+0009"),
    ("invoice\u202egnp.exe", "U+202E"),  # a right-to-left override prints as another name
    ("zero\u200bwidth", "U+200B"),
    ("c1\x85", "U+0085"),
])
def test_a_job_id_with_a_control_or_invisible_character_is_refused_and_never_runs(job_id, held):
    cell = fold(node("n1"), team("nlp"), quota("nlp", 16), job("victim", gpus=8), job(job_id, gpus=8), tick(60_000))
    refusals = [e for e in cell.log if isinstance(e, m.RecordRefused)]
    assert [(e.refused_type, e.envelope.reason) for e in refusals] == [("JobSubmitted", m.Reason.CONTROL_CHARACTER)]
    assert refusals[0].detail.startswith(f"job_id holds {held} at ")
    assert refusals[0].refused_event_id.isprintable() and refusals[0].detail.isprintable()  # it prints as it reads
    assert sorted(cell.state.jobs) == ["victim"]


@pytest.mark.parametrize("record", [
    lambda: node("n\x002"),
    lambda: team("nl\x1bp"),
    lambda: job("ok", gpus=8, labels={"owner": "a\u2066b"}),
    lambda: job("ok", gpus=8, command=["python", "train.py\x1b[31m"]),
])
def test_names_labels_and_free_text_holding_control_characters_are_refused(record):
    cell = fold(node("n1"), team("nlp"), quota("nlp", 16), record(), tick(60_000))
    assert [e.envelope.reason for e in cell.log if isinstance(e, m.RecordRefused)] == [m.Reason.CONTROL_CHARACTER]


def test_free_text_may_break_lines_and_hold_tabs():
    cell = fold(node("n1"), team("nlp"), quota("nlp", 16), job("ok", gpus=8, command=["sh", "-c", "a\tb\nc"]))
    assert not [e for e in cell.log if isinstance(e, m.RecordRefused)]
    assert cell.state.jobs["ok"].state is not None


def test_a_refusal_quotes_what_it_refused_escaped():
    """A cancel naming another team is refused for its provenance before its characters are looked at: the refusal
    still prints as it reads."""
    cancel = m.JobCancelRequested(envelope=env(1_000, "launcher", "cancel-ok"), job_id="ok", team="cv\x1b[2J")
    cell = fold(node("n1"), team("nlp"), quota("nlp", 8), job("ok", gpus=8), cancel)
    refusals = [e for e in cell.log if isinstance(e, m.RecordRefused)]
    assert [e.envelope.reason for e in refusals] == [m.Reason.NOT_ITS_WRITER]
    assert refusals[0].detail == "team cv\\x1b[2J may not cancel ok, a job of team nlp"
