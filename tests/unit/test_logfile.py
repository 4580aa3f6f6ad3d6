"""The portable log: an Avro Object Container File any Avro tool reads, and that Gangway reads back exactly."""

from __future__ import annotations

from pathlib import Path

import fastavro
import pytest
from avro.datafile import DataFileReader
from avro.io import DatumReader

from events.logfile import FORMAT, NotALogFile, _parsed, read_log_file, write_log_file
from replay import cli
from replay.scenario.play import run_file

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


@pytest.fixture(scope="module")
def demo():
    cell = run_file(SCENARIOS / "demo.yaml").cell
    return cell.cell, list(enumerate(cell.log))


def test_an_exported_log_reads_back_equal_record_for_record(demo, tmp_path):
    cell, records = demo
    path = tmp_path / "demo.avro"
    assert write_log_file(path, cell, records, source="scenario demo") == len(records)
    exported = read_log_file(path)
    assert exported.cell == cell and exported.records == records
    assert exported.metadata["source"] == "scenario demo"
    assert (exported.metadata["first_offset"], exported.metadata["last_offset"]) == ("0", str(len(records) - 1))


def test_apache_avro_reads_it_with_the_writer_schema_in_the_file(demo, tmp_path):
    cell, records = demo
    path = tmp_path / "demo.avro"
    write_log_file(path, cell, records)
    with DataFileReader(open(path, "rb"), DatumReader()) as reader:
        rows = list(reader)
        assert reader.get_meta("gangway.cell") == cell.encode()
    assert [r["offset"] for r in rows] == [o for o, _ in records]
    placed = next(i for i, (_, e) in enumerate(records) if e.event_type == "JobPlaced")
    assert rows[placed]["event"]["job_id"] == records[placed][1].job_id
    assert rows[placed]["event"]["envelope"]["reason"] == "PLACED"


def test_exporting_the_same_log_twice_gives_the_same_bytes(demo, tmp_path):
    cell, records = demo
    write_log_file(tmp_path / "a.avro", cell, records, "x")
    write_log_file(tmp_path / "b.avro", cell, records, "x")
    assert (tmp_path / "a.avro").read_bytes() == (tmp_path / "b.avro").read_bytes()


def test_scenario_run_exports_its_log_for_the_audit_commands(tmp_path, capsys):
    out = tmp_path / "reclaim.avro"
    assert cli.main(["scenario", "run", str(SCENARIOS / "reclaim_within_cohort.yaml"), "--quiet",
                     "--export-log", str(out)]) == 0
    exported = read_log_file(out)
    assert exported.records == list(enumerate(run_file(SCENARIOS / "reclaim_within_cohort.yaml").cell.log))


@pytest.mark.parametrize("content, why", [
    (b"", "not an Avro container file"),
    (b"\x00" * 64, "not an Avro container file"),
    (None, "but not an exported Gangway log"),
    ("truncated", "damaged"),
])
def test_a_file_that_is_not_an_exported_log_says_so_in_one_line(demo, tmp_path, content, why):
    path = tmp_path / "bad.avro"
    if content is None:  # a valid Avro file of something else
        with open(path, "wb") as out:
            fastavro.writer(out, {"type": "record", "name": "Other", "fields": [{"name": "x", "type": "long"}]},
                            [{"x": 1}])
    elif content == "truncated":
        write_log_file(path, *demo)
        path.write_bytes(path.read_bytes()[:-200])
    else:
        path.write_bytes(content)
    with pytest.raises(NotALogFile) as error:
        read_log_file(path)
    assert why in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("cut", ["a block", "every block"])
def test_a_file_cut_short_after_a_whole_block_is_refused(demo, tmp_path, cut):
    """Avro alone reads a file cut just after a block's sync marker as a good one holding fewer records: the header's
    record count and last offset tell."""
    cell, records = demo
    path = tmp_path / "demo.avro"
    with open(path, "wb") as out:  # small blocks, so there are several
        fastavro.writer(out, _parsed(), [{"offset": o, "event": (f"gangway.{e.event_type}", e.model_dump())}
                                         for o, e in records], codec="deflate", sync_interval=2_000,
                        metadata={"gangway.format": FORMAT, "gangway.cell": cell, "gangway.records": str(len(records)),
                                  "gangway.last_offset": str(records[-1][0])})
    assert len(read_log_file(path).records) == len(records)
    data = path.read_bytes()
    sync = data[-16:]  # every block ends with the file's sync marker
    ends = [i + len(sync) for i in range(len(data)) if data.startswith(sync, i)]
    assert len(ends) > 3
    path.write_bytes(data[:ends[len(ends) // 2] if cut == "a block" else ends[0]])
    with pytest.raises(NotALogFile, match="truncated or altered: it holds [0-9,]+ records, its header says") as error:
        read_log_file(path)
    assert "\n" not in str(error.value)
    assert cli.main(["verify", "--log", str(path)]) == 1


@pytest.mark.parametrize("damage, why", [
    (lambda block, at: block[:at] + b"\xff" + block[at + 1:], "a string that is not UTF-8"),
    (lambda block, at: block[:at - 2] + b"\x7f" + block[at - 1:], "a record of event type -64"),
])
def test_a_block_whose_records_do_not_follow_the_schema_is_damaged(demo, tmp_path, damage, why):
    cell, records = demo
    path = tmp_path / "plain.avro"
    with open(path, "wb") as out:  # uncompressed, so the damage reaches the records' bytes
        fastavro.writer(out, _parsed(), [{"offset": o, "event": (f"gangway.{e.event_type}", e.model_dump())}
                                         for o, e in records[:5]], codec="null",
                        metadata={"gangway.format": FORMAT, "gangway.cell": cell})
    with open(path, "rb") as handle:
        block = next(fastavro.block_reader(handle)).bytes_.getvalue()
    data = path.read_bytes()
    start = data.rindex(block)
    # the first record: its offset, its event type, then its event id's length and text
    path.write_bytes(data[:start] + damage(block, block.index(records[0][1].envelope.event_id.encode()))
                     + data[start + len(block):])
    with pytest.raises(NotALogFile) as error:
        read_log_file(path)
    assert why in str(error.value) and "damaged" in str(error.value) and "\n" not in str(error.value)
