"""The generated writers (events/encoder.py) write exactly the bytes fastavro writes for the same event, and leave
to fastavro every value a validated model never holds, which it writes or refuses as before."""

import io

import pytest
from fastavro import schemaless_writer
from hypothesis import given, settings
from hypothesis import strategies as st

from events.codec import MAGIC, EventCodec
from events.encoder import Unwritable, writer_for
from events.models import Envelope, JobPlaced, Reason, WorkerAssignment
from events.schema_catalogue import default_catalogue
from tests.any_event import events_of_every_type

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # pydantic's, dumping the unvalidated for fastavro

CURRENT = default_catalogue().current
CODEC = EventCodec()
ENVELOPE = Envelope(event_id="e-1", cell="cell-a", at=1_700_000_000_000, producer="admitter", basis_offset=41,
                    reason=Reason.WITHIN_NOMINAL_QUOTA)


def by_fastavro(event) -> bytes:
    """The record as the codec wrote every record before there were generated writers."""
    version = CURRENT[event.event_type]
    out = io.BytesIO()
    out.write(MAGIC + version.fingerprint_bytes)
    schemaless_writer(out, version.parsed, event.model_dump())
    return out.getvalue()


def generated(event) -> bytes:
    version = CURRENT[event.event_type]
    return writer_for(version, MAGIC + version.fingerprint_bytes)(event)


@settings(max_examples=500, deadline=None)
@given(events_of_every_type())
def test_every_event_type_is_written_to_the_bytes_fastavro_writes(event):
    assert generated(event) == by_fastavro(event)
    assert CODEC.encode(event) == by_fastavro(event)
    assert CODEC.decode(CODEC.encode(event)) == event


def placed(**changes) -> JobPlaced:
    event = JobPlaced(envelope=ENVELOPE, job_id="llm", attempt=1,
                      assignments=[WorkerAssignment(worker=0, node="n1", gpus=[0, 1])], domain="rack-1")
    return event.model_copy(update=changes)  # no validation: a value a validated model never holds stays


@pytest.mark.parametrize("at", [0, 1, -1, 63, 64, -64, -65, 2**31, -(2**31), 2**63 - 1, -(2**63)])
def test_longs_at_every_width(at):
    assert generated(placed(attempt=at)) == by_fastavro(placed(attempt=at))


@pytest.mark.parametrize("text", ["", "x" * 63, "x" * 64, "x" * 8192, "gpu é ✓ 🚀"])
def test_strings_at_every_length_and_beyond_ascii(text):
    assert generated(placed(job_id=text)) == by_fastavro(placed(job_id=text))


@pytest.mark.parametrize("changes", [
    {"attempt": 2**63}, {"attempt": -(2**63) - 1}, {"attempt": True}, {"attempt": 1.0}, {"attempt": "1"},
    {"job_id": None}, {"job_id": 7}, {"job_id": b"llm"}, {"domain": 3}, {"assignments": None},
    {"assignments": ({"worker": 0, "node": "n1", "gpus": [0]},)}, {"assignments": [{"worker": 0, "node": "n1",
                                                                                     "gpus": [0]}]},
    {"envelope": ENVELOPE.model_copy(update={"reason": "NOT_A_REASON"})},
])
def test_a_value_no_validated_model_holds_is_left_to_fastavro(changes):
    """The generated writer refuses it (Unwritable, or AttributeError where a model is a dict); the codec then
    writes the bytes fastavro writes, or raises what fastavro raises."""
    event = placed(**changes)
    with pytest.raises((Unwritable, AttributeError)):
        generated(event)
    try:
        expected: bytes | type[BaseException] = by_fastavro(event)
    except Exception as error:
        expected = type(error)
    try:
        written: bytes | type[BaseException] = CODEC.encode(event)
    except Exception as error:
        written = type(error)
    assert written == expected


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=40), st.text(max_size=100))
def test_arrays_of_any_length_and_any_text(gpus, node):
    event = placed(assignments=[WorkerAssignment(worker=len(gpus), node=node, gpus=gpus)])
    assert generated(event) == by_fastavro(event)


def test_an_enum_symbol_given_as_its_text_is_written_as_fastavro_writes_it():
    event = placed(envelope=ENVELOPE.model_copy(update={"reason": Reason.WITHIN_NOMINAL_QUOTA.value}))
    assert generated(event) == by_fastavro(event) == generated(placed())


def test_a_schema_the_generator_does_not_write_is_written_by_fastavro(monkeypatch):
    """A future schema with a type no generated writer writes (an int, a double, a wider union): encoding falls
    back to fastavro rather than failing."""
    def refuses(version, header):
        raise TypeError(f"no generated writer for {version.name}")

    monkeypatch.setattr("events.codec.writer_for", refuses)
    event = placed()
    assert EventCodec().encode(event) == by_fastavro(event)
