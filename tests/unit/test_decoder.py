"""The generated readers give exactly what fastavro and pydantic give for the same bytes, and refuse what does not
follow the schema: checked side by side on arbitrary events of every type and on damaged copies of their bytes."""

import io

import pytest
from fastavro import schemaless_reader, schemaless_writer
from hypothesis import given, settings
from hypothesis import strategies as st

from events.decoder import Damaged, reader_for
from events.models import EVENT_TYPES, Envelope, JobPlaced, JobSubmitted, Tick, WorkerAssignment
from events.schema_catalogue import default_catalogue
from tests.any_event import events_of_every_type

CURRENT = default_catalogue().current
ENVELOPE = Envelope(event_id="e-1", cell="cell-a", at=1_700_000_000_000, producer="test")
UNREADABLE = (Damaged, IndexError, UnicodeDecodeError)


def body(event) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, CURRENT[event.event_type].parsed, event.model_dump())
    return out.getvalue()


def generated(name: str, data: bytes):
    """The generated reader's event, or raises; every byte must be read."""
    event, end = reader_for(CURRENT[name])(data, 0, len(data))
    if end != len(data):
        raise Damaged(f"{len(data) - end} bytes left")
    return event


def generic(name: str, data: bytes):
    """What fastavro's reader and pydantic's validation make of the same bytes."""
    stream = io.BytesIO(data)
    record = schemaless_reader(stream, CURRENT[name].parsed, None)
    if stream.tell() != len(data):
        raise ValueError("bytes left")
    return type(default_model(name)).model_validate(record)


def default_model(name: str):
    return next(cls for cls in EVENT_TYPES if cls.__name__ == name).model_construct()


def same(a, b) -> None:
    """Equal as pydantic compares them, and alike in every slot pydantic keeps, nested models included."""
    assert type(a) is type(b) and a == b
    assert a.__pydantic_fields_set__ == b.__pydantic_fields_set__
    assert (a.__pydantic_extra__, a.__pydantic_private__) == (b.__pydantic_extra__, b.__pydantic_private__)
    for name, value in a.__dict__.items():
        if hasattr(value, "__pydantic_fields_set__"):
            same(value, b.__dict__[name])
        elif isinstance(value, list):
            for x, y in zip(value, b.__dict__[name], strict=True):
                same(x, y) if hasattr(x, "__pydantic_fields_set__") else None


@settings(max_examples=400, deadline=None)
@given(events_of_every_type())
def test_every_event_type_reads_as_fastavro_and_pydantic_read_it(event):
    data = body(event)
    decoded = generated(event.event_type, data)
    same(decoded, generic(event.event_type, data))
    assert decoded == event


@settings(max_examples=400, deadline=None)
@given(events_of_every_type(), st.data())
def test_damaged_bytes_are_refused_or_read_as_the_generic_reader_reads_them(event, draw):
    data = bytearray(body(event))
    cut = draw.draw(st.sampled_from(["flip", "truncate", "extend"]))
    if cut == "flip" and data:
        at = draw.draw(st.integers(0, len(data) - 1))
        data[at] = draw.draw(st.integers(0, 255))
    elif cut == "truncate":
        del data[draw.draw(st.integers(0, len(data))):]
    else:
        data += bytes(draw.draw(st.lists(st.integers(0, 255), min_size=1, max_size=4)))
    try:
        decoded = generated(event.event_type, bytes(data))
    except UNREADABLE:
        return  # refusing what the schema forbids is right even where the generic reader is more lenient
    same(decoded, generic(event.event_type, bytes(data)))


@pytest.mark.parametrize("at", [0, 1, -1, 63, 64, -64, -65, 2**31, -(2**31), 2**63 - 1, -(2**63)])
def test_longs_read_back_at_every_width(at):
    tick = Tick(envelope=ENVELOPE.model_copy(update={"at": at}))
    assert generated("Tick", body(tick)).at == at


@pytest.mark.parametrize("damage, why", [
    (lambda data: b"\x81" * 11 + b"\x01" + data[1:], "more than 10 bytes"),  # event_id's length
    (lambda data: data[:11] + b"\x81" * 11 + b"\x01" + data[17:], "more than 10 bytes"),  # the time
    (lambda data: b"\x03" + data[1:], "a length of -2 bytes"),
])
def test_bytes_against_the_schema_say_where(damage, why):
    with pytest.raises(Damaged, match=why):
        generated("Tick", damage(body(Tick(envelope=ENVELOPE))))


@pytest.mark.parametrize("length", [b"\x7e", b"\x80\x02"])  # 63 bytes; 64 bytes, in two
def test_a_string_longer_than_the_bytes_left_is_refused(length):
    with pytest.raises(UNREADABLE):
        generated("Tick", length + body(Tick(envelope=ENVELOPE))[1:])


def test_an_array_count_larger_than_the_bytes_left_is_refused_before_reading():
    placed = JobPlaced(envelope=ENVELOPE, job_id="llm", attempt=1, domain="r1",
                       assignments=[WorkerAssignment(worker=0, node="n1", gpus=[0, 1])])
    data = body(placed)
    start = len(body(Tick(envelope=ENVELOPE))) + len(b"\x06llm") + 1  # after the envelope, job_id and attempt
    assert data[start] == 2  # one assignment
    with pytest.raises(Damaged, match="a block of 1000000 items"):
        generated("JobPlaced", data[:start] + b"\x80\x89\x7a" + data[start + 1:])


def test_a_copy_of_a_read_event_with_changes_leaves_the_read_one_alone():
    submitted = JobSubmitted(envelope=ENVELOPE, job_id="llm", team="nlp", workers=2, gpus_per_worker=8,
                             gpu_type="H100")
    first, second = generated("JobSubmitted", body(submitted)), generated("JobSubmitted", body(submitted))
    changed = first.model_copy(update={"workers": 4})
    assert changed.workers == 4 and "workers" in changed.__pydantic_fields_set__
    assert first.workers == second.workers == 2 and first.__pydantic_fields_set__ == set(JobSubmitted.model_fields)
    with pytest.raises(Exception, match="frozen"):
        first.workers = 3


def test_a_model_with_checks_beyond_its_types_gets_no_generated_reader():
    from pydantic import Field, field_validator

    from events.decoder import generate
    from events.models import Event

    class Bounded(Event):
        gpus: int = Field(ge=1)

    class Checked(Event):
        team: str

        @field_validator("team")
        @classmethod
        def lower(cls, value: str) -> str:
            return value.lower()

    tick = CURRENT["Tick"].schema
    for model in (Bounded, Checked):
        with pytest.raises(TypeError, match="cannot skip pydantic's validation"):
            generate(model, tick)
