"""schemas/ is the contract of the log: in step with the models, and compatible with every released version."""

import json

import avro.schema
import pytest
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

from events.models import EVENT_TYPES
from events.schema_catalogue import SCHEMAS_DIR, default_catalogue
from events.schemas_cli import stale_schemas, unreleased_schemas

catalogue = default_catalogue()
HISTORY = [(name, version) for name, versions in sorted(catalogue.history.items()) for version in versions]


def test_checked_in_schemas_match_the_models():
    assert stale_schemas() == [], "run `gangway schemas write`"


def test_every_current_schema_is_released():
    assert unreleased_schemas(catalogue) == [], "run `gangway schemas release`"


def test_record_name_class_name_and_file_name_agree():
    assert sorted(p.stem for p in SCHEMAS_DIR.glob("*.avsc")) == sorted(cls.__name__ for cls in EVENT_TYPES)
    for path in SCHEMAS_DIR.glob("*.avsc"):
        assert json.loads(path.read_text())["name"] == path.stem
    for folder in (SCHEMAS_DIR / "history").iterdir():
        for path in folder.glob("*.avsc"):
            assert json.loads(path.read_text())["name"] == folder.name


def _compatible(reader: dict, writer: dict) -> bool:
    result = ReaderWriterCompatibilityChecker().get_compatibility(
        avro.schema.parse(json.dumps(reader)), avro.schema.parse(json.dumps(writer)))
    return result.compatibility is SchemaCompatibilityType.compatible


@pytest.mark.parametrize(("name", "version"), HISTORY, ids=[f"{n}-v{v.version}" for n, v in HISTORY])
def test_current_schema_reads_every_released_version(name, version):
    """Backward: today's reader reads what any release wrote."""
    assert _compatible(reader=catalogue.current[name].schema, writer=version.schema)


@pytest.mark.parametrize(("name", "version"), HISTORY, ids=[f"{n}-v{v.version}" for n, v in HISTORY])
def test_every_released_version_reads_the_current_schema(name, version):
    """Forward: a reader from any release reads what today writes."""
    assert _compatible(reader=version.schema, writer=catalogue.current[name].schema)


def test_the_checker_would_catch_an_incompatible_change():
    current = catalogue.current["JobSubmitted"].schema
    broken = json.loads(json.dumps(current))
    broken["fields"].append({"name": "deadline_ms", "type": "long"})  # new field without a default
    assert not _compatible(reader=broken, writer=current)


def test_fingerprints_are_unique():
    fingerprints = [v.fingerprint for _, v in HISTORY]
    assert len(fingerprints) == len(set(fingerprints))
