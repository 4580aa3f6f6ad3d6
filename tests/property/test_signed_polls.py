"""Hostile signature headers never stop a reader: `Verifier.signers_of` over a poll of genuine records, damaged
copies of them and made-up ones returns a verdict for each (no exception), and never vouches for a value that no
writer signed."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from events.signing import SIGNATURE_HEADERS, Signer, Verifier, public_key

TOPIC = "gangway.events"
SEEDS = {"admitter": b"\x01" * 32, "placer": b"\x02" * 32}
HUGE = 2**32 - 1

header_values = st.one_of(
    st.none(), st.binary(max_size=80), st.text(max_size=20),
    st.sampled_from([b"admitter", b"placer", b"\xff\xfe", b"\x00" * 32, b"\x00" * 64]),
    st.tuples(st.integers(0, HUGE), st.integers(0, HUGE), st.binary(max_size=96)).map(
        lambda t: struct.pack(">II", t[0], t[1]) + t[2]))
made_up = st.tuples(st.binary(max_size=40), st.lists(
    st.tuples(st.sampled_from([*SIGNATURE_HEADERS, "traceparent"]), header_values), max_size=7))


@settings(max_examples=300, deadline=None)
@given(sizes=st.lists(st.integers(1, 5), min_size=1, max_size=5), data=st.data())
def test_any_poll_gets_a_verdict_per_record_and_no_unsigned_value_is_vouched_for(sizes, data) -> None:
    signed: list[tuple] = []
    for b, size in enumerate(sizes):
        name = data.draw(st.sampled_from(sorted(SEEDS)))
        values = [f"batch {b} record {i}".encode() for i in range(size)]
        signed += [(TOPIC, 0, v, h) for v, h in zip(values, Signer(name, SEEDS[name]).sign(TOPIC, 0, values))]
    poll = list(signed)
    for _ in range(data.draw(st.integers(0, 6))):
        kind = data.draw(st.sampled_from(["copy", "value", "header", "made up"]))
        topic, partition, value, headers = data.draw(st.sampled_from(signed))
        if kind == "value":
            value = value + data.draw(st.binary(min_size=1, max_size=8))
        elif kind == "header":
            name, raw = data.draw(st.sampled_from(SIGNATURE_HEADERS)), data.draw(header_values)
            headers = [(n, raw if n == name else v) for n, v in headers]
        elif kind == "made up":
            value, headers = data.draw(made_up)
        poll.insert(data.draw(st.integers(0, len(poll))), (topic, partition, value, headers))
    verdicts = Verifier({name: public_key(seed) for name, seed in SEEDS.items()}).signers_of(poll)
    genuine = {v for _, _, v, _ in signed}
    assert len(verdicts) == len(poll)
    assert all(who is None or value in genuine for (_, _, value, _), who in zip(poll, verdicts))


def spoiled(record: tuple, how: str, byte: int) -> tuple:
    """A copy of a signed record with its value or its path changed."""
    topic, partition, value, headers = record
    if how == "value":
        return topic, partition, value + bytes([byte]), headers
    path = dict(headers)["gw-path"]
    changed = {"a sibling byte": path[:8] + bytes([path[8 + byte % max(len(path) - 8, 1)] ^ 1]) + path[9 + byte % max(
                   len(path) - 8, 1):] if len(path) > 8 else path + b"\x00",
               "a byte more": path + bytes([byte]), "a byte less": path[:-1],
               "another index": struct.pack(">II", byte % max(struct.unpack_from(">II", path)[1], 1),
                                            struct.unpack_from(">II", path)[1]) + path[8:]}[how]
    return topic, partition, value, [(n, changed if n == "gw-path" else v) for n, v in headers]


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(2, 40), min_size=1, max_size=3), data=st.data())
def test_a_record_read_after_others_of_its_batch_gets_the_verdict_it_gets_alone(sizes, data) -> None:
    """However a reader's polls split batches, each record is vouched for exactly when it would be read alone, by
    a fresh reader: a record climbing to where its path meets one found before (Verifier._alone) answers the same
    as its whole walk, for genuine records, copies, and records with a changed value or path."""
    signer = Signer("admitter", SEEDS["admitter"])
    records: list[tuple] = []
    for b, size in enumerate(sizes):
        values = [f"batch {b} record {i}".encode() for i in range(size)]
        records += [(TOPIC, 0, v, h) for v, h in zip(values, signer.sign(TOPIC, 0, values))]
    for _ in range(data.draw(st.integers(0, 12))):
        how = data.draw(st.sampled_from(["copy", "value", "a sibling byte", "a byte more", "a byte less",
                                         "another index"]))
        original = data.draw(st.sampled_from(records))
        records.append(original if how == "copy" else spoiled(original, how, data.draw(st.integers(0, 255))))
    order = data.draw(st.permutations(records))
    keys = {name: public_key(seed) for name, seed in SEEDS.items()}
    reader = Verifier(keys)
    one_by_one = [reader.signers_of([record])[0] for record in order]  # no poll holds a whole batch
    assert one_by_one == [Verifier(keys).signers_of([record])[0] for record in order]
