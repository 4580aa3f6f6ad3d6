"""The Avro codec: every event type round-trips, old versions decode, bad bytes fail with a reason."""

import io

import pytest
from fastavro import parse_schema, schemaless_writer
from fastavro.schema import fingerprint, to_parsing_canonical_form
from hypothesis import given, settings

from events.codec import MAGIC, EventCodec, Undecodable, UndecodableEvent
from events.models import (
    DeadLetter,
    Envelope,
    JobPlaced,
    JobSubmitted,
    WorkerAssignment,
)
from events.schema_catalogue import default_catalogue
from tests.any_event import events_of_every_type

codec = EventCodec()
ENVELOPE = Envelope(event_id="e-1", cell="cell-a", at=1_700_000_000_000, producer="test")


@settings(max_examples=300, deadline=None)
@given(events_of_every_type())
def test_every_event_type_round_trips(event):
    assert codec.decode(codec.encode(event)) == event


def test_encoding_is_avro_single_object_with_crc64_fingerprint():
    event = JobSubmitted(envelope=ENVELOPE, job_id="llm", team="nlp", workers=16, gpus_per_worker=8, gpu_type="H100")
    data = codec.encode(event)
    schema = default_catalogue().current["JobSubmitted"].schema
    canonical = to_parsing_canonical_form(parse_schema(schema, _write_hint=False))
    assert data[:2] == MAGIC
    assert data[2:10].hex() == fingerprint(canonical, "CRC-64-AVRO")


def test_nested_records_and_bytes_survive():
    placed = JobPlaced(envelope=ENVELOPE, job_id="llm", attempt=2, domain="rack-3",
                       assignments=[WorkerAssignment(worker=0, node="n1", gpus=[0, 1, 2, 3])])
    letter = DeadLetter(envelope=ENVELOPE, source_topic="t", source_partition=0, source_offset=7,
                        key=b"cell-a", value=b"\x00\xff garbage", error="NOT_SINGLE_OBJECT: ...")
    assert codec.decode(codec.encode(placed)) == placed
    assert codec.decode(codec.encode(letter)) == letter


def test_a_record_written_with_version_1_decodes_with_the_current_reader():
    v1 = default_catalogue().history["JobSubmitted"][0]
    assert v1.version == 1 and "labels" not in {f["name"] for f in v1.schema["fields"]}
    body = io.BytesIO()
    schemaless_writer(body, v1.parsed, {
        "envelope": ENVELOPE.model_dump(), "job_id": "old", "team": "nlp", "workers": 2, "gpus_per_worker": 8,
        "gpu_type": "A100", "priority_class": None, "min_workers": None, "topology_required": "rack",
        "topology_preferred": None, "time_limit_ms": None, "max_restarts": 3,
    })
    decoded = codec.decode(MAGIC + v1.fingerprint_bytes + body.getvalue())
    assert decoded == JobSubmitted(envelope=ENVELOPE, job_id="old", team="nlp", workers=2, gpus_per_worker=8,
                                   gpu_type="A100", topology_required="rack", labels={})


@pytest.mark.parametrize(("data", "why"), [
    (None, Undecodable.NOT_SINGLE_OBJECT),
    (b"", Undecodable.NOT_SINGLE_OBJECT),
    (b'{"job_id": "json is not avro"}', Undecodable.NOT_SINGLE_OBJECT),
    (MAGIC + b"\x01\x02\x03\x04\x05\x06\x07\x08body", Undecodable.UNKNOWN_FINGERPRINT),
])
def test_bytes_that_are_not_events_say_why(data, why):
    with pytest.raises(UndecodableEvent) as error:
        codec.decode(data)
    assert error.value.why is why


def test_truncated_and_padded_bodies_are_corrupt():
    data = codec.encode(JobSubmitted(envelope=ENVELOPE, job_id="llm", team="nlp", workers=1, gpus_per_worker=1,
                                     gpu_type="H100"))
    for broken in (data[:-5], data + b"\x00\x00"):
        with pytest.raises(UndecodableEvent) as error:
            codec.decode(broken)
        assert error.value.why is Undecodable.CORRUPT_BODY
