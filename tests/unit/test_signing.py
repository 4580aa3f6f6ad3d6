"""Signed records on a cell's log (events/signing.py): a record is vouched for only by a valid signature of a
writer that may write it; anything else is marked unverified, and the fold refuses it."""

from __future__ import annotations

import struct
from collections import OrderedDict

import pytest

from events import models as m
from events import signing
from events.auth import AuthError, signer, writer_keys
from events.signing import Signer, Verifier, may_write, public_key, vouched
from projections.cell import CellState
from projections.store import ProjectionStore
from services.admitter.decide import Admitter
from services.core.replica import Replica
from services.policy import DEFAULT_POLICY
from tests.builders import env, fold, job, node, quota, team, topology

TOPIC = "gangway.events"
original_walk = signing._walk
original_met = signing._met
SEEDS = {name: bytes([i]) * 32 for i, name in enumerate(("admin", "admitter", "placer", "clock", "intake"), 1)}


def verifier() -> Verifier:
    return Verifier({name: public_key(seed) for name, seed in SEEDS.items()})


def signed(name: str, values: list[bytes], partition: int = 0) -> list[list[tuple[str, bytes]]]:
    return Signer(name, SEEDS[name]).sign(TOPIC, partition, values)


@pytest.mark.parametrize("count", [1, 2, 3, 5, 8, 13])
def test_every_record_of_a_batch_is_vouched_for_alone(count: int) -> None:
    values = [f"record {i}".encode() for i in range(count)]
    headers = signed("admitter", values)
    for value, header in reversed(list(zip(values, headers))):  # any order, each on its own: a fresh reader
        assert Verifier({"admitter": public_key(SEEDS["admitter"])}).signer_of(TOPIC, 0, value, header) == "admitter"
    shared = verifier()
    assert [shared.signer_of(TOPIC, 0, v, h) for v, h in zip(values, headers)] == ["admitter"] * count


def test_a_changed_value_a_moved_header_or_another_partition_is_not_vouched_for() -> None:
    values = [b"a", b"b", b"c"]
    headers = signed("admitter", values, partition=2)
    check = verifier()
    assert check.signer_of(TOPIC, 2, b"a!", headers[0]) is None
    assert check.signer_of(TOPIC, 2, b"b", headers[0]) is None  # b's value with a's path
    assert check.signer_of(TOPIC, 1, b"a", headers[0]) is None  # signed for partition 2
    assert check.signer_of("other", 2, b"a", headers[0]) is None
    assert check.signer_of(TOPIC, 2, b"a", headers[0][:3]) is None  # no path
    assert check.signer_of(TOPIC, 2, b"a", []) is None
    assert check.signer_of(TOPIC, 2, b"a", headers[0]) == "admitter"


def test_a_writer_cannot_sign_in_another_writers_name() -> None:
    """The placer's key under the admitter's name: its signature does not check against the admitter's key."""
    forged = Signer("admitter", SEEDS["placer"]).sign(TOPIC, 0, [b"admit"])[0]
    assert verifier().signer_of(TOPIC, 0, b"admit", forged) is None
    unknown = Signer("mallory", SEEDS["placer"]).sign(TOPIC, 0, [b"admit"])[0]
    assert verifier().signer_of(TOPIC, 0, b"admit", unknown) is None


def test_garbage_headers_are_not_vouched_for() -> None:
    good = signed("admitter", [b"x", b"y"])[0]
    for name, bad in [("gw-path", b""), ("gw-path", b"\x00\x00\x00\x05\x00\x00\x00\x02"), ("gw-path", b"\xff" * 9),
                      ("gw-signer", b"\xff\xfe"), ("gw-sig", b"short")]:
        headers = [(n, bad if n == name else v) for n, v in good]
        assert verifier().signer_of(TOPIC, 0, b"x", headers) is None, name


class Counting:
    """A writer's public key that counts the signatures checked with it."""

    def __init__(self, key) -> None:
        self.key, self.checked = key, 0

    def verify(self, *args):
        self.checked += 1
        return self.key.verify(*args)


def elsewhere(monkeypatch) -> tuple[Verifier, dict[str, Counting]]:
    """A reader in another process than the writers (nothing signed here is taken unchecked), counting its checks."""
    monkeypatch.setattr(signing, "_signed_here", OrderedDict())
    check = verifier()
    check._keys = counting = {name: Counting(key) for name, key in check._keys.items()}
    return check, counting


def batches(name: str, sizes: list[int], partition: int = 0, writer: Signer | None = None) -> list[tuple]:
    """Consecutive batches one writer signs, as (topic, partition, value, headers) in log order."""
    writer = writer or Signer(name, SEEDS[name])
    out = []
    for b, size in enumerate(sizes):
        values = [f"{name} batch {b} record {i}".encode() for i in range(size)]
        out += [(TOPIC, partition, v, h) for v, h in zip(values, writer.sign(TOPIC, partition, values))]
    return out


def test_a_run_of_a_writers_batches_read_newest_first_costs_one_signature_check(monkeypatch) -> None:
    records = batches("admitter", [3, 1, 2, 5])
    check, counting = elsewhere(monkeypatch)
    assert check.signers_of(records) == ["admitter"] * 11
    assert counting["admitter"].checked == 1
    # read oldest first, one record at a time, each batch is checked on its own
    check, counting = elsewhere(monkeypatch)
    assert [check.signer_of(*r) for r in records] == ["admitter"] * 11
    assert counting["admitter"].checked == 4


def test_two_writers_interleaved_each_cost_one_check_and_a_chain_stays_on_its_partition(monkeypatch) -> None:
    mine, theirs, other_partition = batches("admitter", [2, 2]), batches("placer", [1, 3]), batches("admitter", [2],
                                                                                                   partition=1)
    records = [mine[0], *theirs[:1], mine[1], *other_partition, *theirs[1:], *mine[2:]]
    check, counting = elsewhere(monkeypatch)
    assert check.signers_of(records) == [r[2].decode().split()[0] for r in records]
    assert (counting["admitter"].checked, counting["placer"].checked) == (2, 1)


def test_a_chain_vouches_for_nothing_changed_or_forged(monkeypatch) -> None:
    """A value changed in an earlier batch, or the link of a batch changed, is not vouched for by the batch after
    it; a batch another key signed in the writer's name is never linked to by the writer's own."""
    records = batches("admitter", [2, 2, 2])
    changed = list(records)
    topic, partition, value, headers = changed[2]
    changed[2] = (topic, partition, value + b"!", headers)
    check, _ = elsewhere(monkeypatch)
    assert check.signers_of(changed) == ["admitter", "admitter", None, "admitter", "admitter", "admitter"]
    relinked = list(records)
    topic, partition, value, headers = relinked[3]
    relinked[3] = (topic, partition, value, [(n, b"\x00" * 32 if n == "gw-prev" else v) for n, v in headers])
    check, _ = elsewhere(monkeypatch)
    assert check.signers_of(relinked) == ["admitter", "admitter", "admitter", None, "admitter", "admitter"]
    forger = Signer("admitter", SEEDS["placer"])
    forged = batches("admitter", [1], writer=forger)
    genuine = batches("admitter", [1])
    check, counting = elsewhere(monkeypatch)
    assert check.signers_of([*forged, *genuine]) == [None, "admitter"]
    assert counting["admitter"].checked == 2


def test_a_writer_cannot_vouch_by_its_links_for_a_batch_in_another_writers_name(monkeypatch) -> None:
    """The placer links its own, validly signed batch to the digest of a batch it forged in the admitter's name:
    the link proves messages of the placer only, so the forged batch is checked on its own signature, and fails."""
    value, batch = b"forged admission", b"\x00" * 8
    forged_message = signing._message("admitter", batch, TOPIC, 0, 1, signing._leaf(value), None)
    forged = [("gw-signer", b"admitter"), ("gw-batch", batch), ("gw-sig", b"\x00" * 64),
              ("gw-path", struct.pack(">II", 0, 1))]
    placer = Signer("placer", SEEDS["placer"])
    monkeypatch.setitem(signing._last_signed, ("placer", SEEDS["placer"], TOPIC, 0), signing._digest(forged_message))
    linking = batches("placer", [1], writer=placer)
    check, _ = elsewhere(monkeypatch)
    assert check.signers_of([(TOPIC, 0, value, forged), *linking]) == [None, "placer"]


def test_a_link_to_a_batch_no_reader_sees_costs_the_batch_before_it_its_own_check(monkeypatch) -> None:
    """An aborted transaction's batch is signed and linked to, but never read: the chain breaks there, safely."""
    records = batches("admitter", [2, 1, 2])
    check, counting = elsewhere(monkeypatch)
    assert check.signers_of([*records[:2], *records[3:]]) == ["admitter"] * 4
    assert counting["admitter"].checked == 2


def test_a_whole_batch_is_checked_on_the_root_its_values_make_and_a_broken_one_record_by_record(monkeypatch) -> None:
    """Every record of a batch at hand: one root from their values, no path walked. A copy of one of its records
    (written again), a value changed, or a size claimed that no batch has: each record is then checked alone (the
    first along its whole path, the others to where their paths meet the one before)."""
    walked, met = [], []
    monkeypatch.setattr(signing, "_walk", lambda *args: walked.append(args) or original_walk(*args))
    monkeypatch.setattr(signing, "_met", lambda *args: met.append(args) or original_met(*args))
    records = batches("admitter", [4, 3])
    check, counting = elsewhere(monkeypatch)
    assert check.signers_of(records) == ["admitter"] * 7
    assert (walked, counting["admitter"].checked) == ([], 1)
    copied = [*records[:4], records[1], *records[4:]]
    check, counting = elsewhere(monkeypatch)
    assert check.signers_of(copied) == ["admitter"] * 8
    assert (len(walked), len(met), counting["admitter"].checked) == (1, 4, 1)  # the first batch's five alone
    topic, partition, value, headers = records[2]
    changed = [*records[:2], (topic, partition, value + b"!", headers), *records[3:]]
    check, _ = elsewhere(monkeypatch)
    assert check.signers_of(changed) == ["admitter", "admitter", None, "admitter", "admitter", "admitter", "admitter"]
    huge = [(n, struct.pack(">II", 0, 2**32 - 1) if n == "gw-path" else v) for n, v in headers]
    assert check.signers_of([(topic, partition, value, huge)]) == [None]


def test_a_batch_split_between_polls_is_vouched_for_record_by_record_and_a_changed_record_is_caught(
        monkeypatch) -> None:
    """A transaction's records may arrive over two polls: neither part is a whole batch, so each record is checked
    along its own path. One signature check covers both parts; a record whose value changed leads to a root no one
    signed and is refused."""
    records = batches("admitter", [13])
    check, counting = elsewhere(monkeypatch)
    assert check.signers_of(records[:6]) == ["admitter"] * 6
    assert check.signers_of(records[6:]) == ["admitter"] * 7
    assert counting["admitter"].checked == 1
    topic, partition, value, headers = records[9]
    changed = [*records[6:9], (topic, partition, value + b"!", headers), *records[10:]]
    check, counting = elsewhere(monkeypatch)
    assert check.signers_of(changed) == ["admitter"] * 3 + [None] + ["admitter"] * 3
    for at in range(13):  # a part of any size, from anywhere in the batch
        for end in range(at + 1, 14):
            assert verifier().signers_of(records[at:end]) == ["admitter"] * (end - at)


@pytest.mark.parametrize("spoil", ["an upper sibling", "a byte more", "a byte less"])
def test_a_record_with_a_spoiled_path_is_refused_alone_and_beside_the_rest_of_its_batch(spoil: str) -> None:
    """Every reader must take the same records, however its polls split a batch: a record whose value is the
    writer's but whose path is not is refused when read alone, and as well when another record of its batch was
    found authentic just before it (a shortcut through the nodes that record's check found took it)."""
    records = batches("admitter", [8])
    topic, partition, value, headers = records[5]
    path = dict(headers)[signing.PATH]
    spoiled = {"an upper sibling": path[:-1] + bytes([path[-1] ^ 1]), "a byte more": path + b"\x00",
               "a byte less": path[:-1]}[spoil]
    record = (topic, partition, value, [(n, spoiled if n == signing.PATH else v) for n, v in headers])
    assert verifier().signers_of([record]) == [None]
    # read newest first: records[6] is found authentic before the spoiled record climbs
    assert verifier().signers_of([record, records[6]]) == [None, "admitter"]
    assert verifier().signers_of([records[4], record, records[6]]) == ["admitter", None, "admitter"]
    assert verifier().signers_of([records[4], records[5], records[6]]) == ["admitter"] * 3


def test_a_record_without_its_link_or_with_two_links_is_not_vouched_for(monkeypatch) -> None:
    records = batches("admitter", [1, 1])
    topic, partition, value, headers = records[1]
    check, _ = elsewhere(monkeypatch)
    assert check.signer_of(topic, partition, value, [h for h in headers if h[0] != "gw-prev"]) is None
    assert check.signer_of(topic, partition, value, [*headers, ("gw-prev", b"\x01" * 32)]) is None
    assert check.signer_of(topic, partition, value, [(n, v[:5] if n == "gw-prev" else v) for n, v in headers]) is None
    assert check.signer_of(topic, partition, value, headers) == "admitter"


def test_a_signature_header_present_without_a_value_counts_as_present() -> None:
    """A header of no value (Kafka allows one) is there, as the bytes b"None", not missing: an unchained record with
    an empty link is not vouched for (its link is not a digest), and a record with an empty signature in a batch
    whose every record is read is vouched for by the batch's root, as one with any other wrong signature is."""
    first = signed("admitter", [b"a"])[0]
    assert verifier().signer_of(TOPIC, 0, b"a", first) == "admitter"
    assert verifier().signer_of(TOPIC, 0, b"a", [*first, ("gw-prev", None)]) is None
    values = [b"x", b"y", b"z"]
    headers = signed("admitter", values)
    for wrong in (None, b"\x00" * 64):
        emptied = [[(n, wrong if n == "gw-sig" and i == 1 else v) for n, v in h] for i, h in enumerate(headers)]
        assert verifier().signers_of([(TOPIC, 0, v, h) for v, h in zip(values, emptied)]) == ["admitter"] * 3


def admitted(producer: str) -> m.JobAdmitted:
    return m.JobAdmitted(envelope=env(producer=producer).model_copy(update={"basis_offset": 0}), job_id="j",
                         team="nlp", gpu_type="H100", gpus=8,
                         assignments=[m.WorkerAssignment(worker=0, node="n0", gpus=list(range(8)))])


def test_who_may_sign_what() -> None:
    decision, tick = admitted("admitter"), m.Tick(envelope=env(producer="clock"))
    request = team("nlp")
    assert may_write("admitter", decision) and may_write("admin", decision)
    assert not may_write("placer", decision) and not may_write("intake", decision) and not may_write(None, decision)
    assert may_write("clock", tick) and not may_write("admitter", tick)
    assert may_write("intake", request) and not may_write("admitter", request) and not may_write("clock", request)


def test_a_record_its_signer_may_not_write_is_refused_by_the_fold_and_never_folded() -> None:
    cell = fold(team("nlp"), vouched(quota("nlp", 64), "placer"), vouched(admitted("admitter"), None),
                vouched(quota("nlp", 16), "intake"))
    refused = [(e.refused_type, e.envelope.reason, e.detail) for e in cell.log if isinstance(e, m.RecordRefused)]
    assert refused == [
        ("QuotaSet", m.Reason.NOT_ITS_WRITER,
         "a QuotaSet claiming 'test' is signed by 'placer', which may not write it"),
        ("JobAdmitted", m.Reason.NOT_ITS_WRITER, "a JobAdmitted claiming 'admitter' is not signed by any writer of the log"),
    ]
    assert cell.state.tenancy.quotas[("nlp", "H100")].nominal == 16


def test_a_record_with_two_signatures_is_not_vouched_for() -> None:
    """A copy of another record's headers next to a valid signature: ambiguous, so refused."""
    mine = signed("admitter", [b"x"])[0]
    other = signed("admin", [b"y"])[0]
    assert verifier().signer_of(TOPIC, 0, b"x", [*other, *mine]) is None
    assert verifier().signer_of(TOPIC, 0, b"x", mine) == "admitter"


def test_a_forged_copy_of_a_decision_in_flight_does_not_land_in_its_place() -> None:
    """A record in the admitter's name with the id of its decision in flight, but not signed by it: refused, and
    the decision stays in flight until the admitter's own record lands."""
    replica = Replica(Admitter(), DEFAULT_POLICY, CellState(cell="test-cell"))
    offset = 0
    for event in (topology("rack"), node("n0", rack="r0"), team("nlp"), quota("nlp", 8)):
        replica.consume(offset, event)
        offset += 1
    decided = replica.consume(offset, job("j", gpus=8))
    admitted = next(d for d in decided if isinstance(d, m.JobAdmitted))
    answer = replica.consume(offset + 1, vouched(admitted, "placer"))
    assert [(type(d).__name__, d.envelope.reason) for d in answer] == [("RecordRefused", m.Reason.NOT_ITS_WRITER)]
    assert admitted.envelope.event_id in replica.assumed
    replica.consume(offset + 2, admitted)  # the admitter's own record
    assert admitted.envelope.event_id not in replica.assumed
    assert replica.state.jobs["j"].state.value in ("admitted", "placed")


def taken_in(event: m.Event, origin: str, origin_offset: int) -> m.Event:
    """An input as the intake writes it onto the cell's log."""
    return event.model_copy(update={"envelope": event.envelope.model_copy(
        update={"origin": origin, "origin_offset": origin_offset})})


def test_a_signed_input_written_again_is_refused() -> None:
    """A signature says who wrote a record, not when: a copy of an input written again carries an input offset its
    origin has passed, and the fold refuses it (here an old quota, which would roll the team's quota back)."""
    cell = fold(taken_in(team("nlp"), "operator", 0), taken_in(quota("nlp", 64), "operator", 1),
                taken_in(quota("nlp", 16), "operator", 2), taken_in(quota("nlp", 64), "operator", 1),
                taken_in(quota("nlp", 32), "operator", 7))
    refused = [(e.refused_type, e.envelope.reason, e.detail) for e in cell.log if isinstance(e, m.RecordRefused)]
    assert refused == [("QuotaSet", m.Reason.NOT_ITS_WRITER, "a QuotaSet from operator's input offset 1, which the "
                        "cell has taken in already (up to offset 2): a copy written again")]
    assert cell.state.tenancy.quotas[("nlp", "H100")].nominal == 32
    assert cell.state.taken == {"operator": 7}


def test_the_input_offsets_taken_survive_a_save_and_restore(tmp_path) -> None:
    cell = fold(taken_in(team("nlp"), "operator", 4), taken_in(job("j", gpus=8), "team/nlp", 9))
    store = ProjectionStore(tmp_path / "store")
    store.save(cell.state, everything=True)
    assert store.load().taken == {"operator": 4, "team/nlp": 9}


def test_a_process_takes_back_what_it_signed_itself_without_checking_again() -> None:
    """A service reading back its own decisions skips the signature check; only a root signed here with the
    writer's own key counts so (a key signing in another writer's name does not)."""
    check = verifier()

    class Refuses:
        def verify(self, *_):
            raise AssertionError("checked again")

    check._keys = {name: Refuses() for name in SEEDS}
    mine = signed("admitter", [b"decision"])[0]
    assert check.signer_of(TOPIC, 0, b"decision", mine) == "admitter"
    forged = Signer("admitter", SEEDS["placer"]).sign(TOPIC, 0, [b"decision"])[0]
    with pytest.raises(AssertionError, match="checked again"):
        check.signer_of(TOPIC, 0, b"decision", forged)


@pytest.mark.parametrize("given", ["admin:xyz", "admin:abcd", ":" + "00" * 32, "admin"])
def test_a_malformed_signing_key_is_one_clear_error(monkeypatch, given: str) -> None:
    monkeypatch.setenv("GANGWAY_SIGNING_KEY", given)
    with pytest.raises(AuthError, match="is not '<writer>:<64 hex digits>'"):
        signer(None, "127.0.0.1:9092")


@pytest.mark.parametrize("content", ['{"admitter": "zz"}', '{"admitter": "abcd"}', '["x"]', "not json"])
def test_a_malformed_keys_file_is_one_clear_error(monkeypatch, tmp_path, content: str) -> None:
    path = tmp_path / "writer-keys.json"
    path.write_text(content)
    monkeypatch.setenv("GANGWAY_WRITER_KEYS", str(path))
    with pytest.raises(AuthError, match="writers' keys"):
        writer_keys("127.0.0.1:9092")
    monkeypatch.setenv("GANGWAY_WRITER_KEYS", str(tmp_path / "missing.json"))
    with pytest.raises(AuthError, match="No such file"):
        writer_keys("127.0.0.1:9092")


@pytest.mark.parametrize("origin_offset", [0, 10**9, 2**63 - 1])
def test_hostile_inputs_taken_in_never_stop_the_fold_and_keep_no_oversized_origin(origin_offset: int) -> None:
    """Input offsets of any size, a node name of 200,000 characters, another node's fact, a time far ahead: each
    is folded or refused, and the cell keeps an offset only for origins that fit in a row."""
    huge = "n" * 200_000
    replica = Replica(Admitter(), DEFAULT_POLICY, CellState(cell="test-cell"))
    inputs = [topology("rack"), node("n0", rack="r0"), team("nlp"), quota("nlp", 64),
              taken_in(job("a"), "team/nlp", origin_offset), taken_in(job("b"), "team/nlp", -1),
              taken_in(node(huge), f"node/{huge}", 5), taken_in(node("n9"), "node/n1", 6),
              taken_in(job("c", at=2**62), "team/nlp", 2**63 - 1), taken_in(job("d"), f"team/{huge}", 7)]
    refused = []
    for offset, event in enumerate(inputs):
        refused += [d.envelope.reason for d in replica.consume(offset, event) if isinstance(d, m.RecordRefused)]
    assert m.Reason.OVERSIZED in refused and refused.count(m.Reason.NOT_ITS_WRITER) >= 3
    assert set(replica.state.taken) == {"team/nlp"}


@pytest.mark.parametrize("count", range(1, 18))
def test_a_batchs_root_is_the_top_of_its_tree(count: int) -> None:
    leaves = [signing._leaf(f"record {i}".encode()) for i in range(count)]
    assert signing._top(leaves) == signing._levels(leaves)[-1][0]


def test_only_records_signed_as_a_known_writer_signs_them_are_vouched_for() -> None:
    """Malformed signature headers claim nothing; a writer the reader has no key of vouches for nothing."""
    first = signed("admitter", [b"a", b"b"])  # a writer's first batch: four headers, no link
    chained = signed("admitter", [b"c", b"d", b"e"])  # five headers, linked to the first
    unknown = Signer("stranger", bytes([9]) * 32).sign(TOPIC, 0, [b"f", b"g"])
    records = [(TOPIC, 0, b"a", first[0]), (TOPIC, 0, b"b", first[1]),
               *[(TOPIC, 0, v, h) for v, h in zip([b"c", b"d", b"e"], chained)],
               (TOPIC, 0, b"f", unknown[0]), (TOPIC, 0, b"g", unknown[1]),
               (TOPIC, 0, None, chained[0]),  # no value
               (TOPIC, 0, b"c", [(k, v.decode("latin-1")) for k, v in chained[0]]),  # headers as text
               (TOPIC, 0, b"c", [*chained[0][:3], (signing.PATH, struct.pack(">II", 3, 3)), chained[0][4]]),  # index >= count
               (TOPIC, 0, b"c", [*chained[0][:3], (signing.PATH, b"\x00" * 7), chained[0][4]]),  # path too short
               (TOPIC, 0, b"c", [*chained[0][:4], (signing.PREVIOUS, b"short")]),  # a link of the wrong length
               (TOPIC, 0, b"c", [chained[0][1], chained[0][0], *chained[0][2:]]),  # headers in another order
               (TOPIC, 0, b"c", [(signing.SIGNER, b"\xff\xfe"), *chained[0][1:]])]  # a name that is not UTF-8
    claims_nothing = [signing._claim(*record) is None for record in records]
    assert claims_nothing == [False] * 7 + [True] * 5 + [False, True]  # headers in another order still claim
    assert verifier().signers_of(records) == ["admitter"] * 5 + [None] * 7 + ["admitter", None]


def test_a_copy_with_another_signature_is_judged_on_it_though_its_batch_was_found_authentic(monkeypatch) -> None:
    """The shortcut of a split batch (a record climbing only to where its path meets the last one found authentic)
    is taken only by a record carrying the same signature: a copy with garbage in its signature is checked on it
    once its batch's message is no longer remembered, as a reader without the shortcut checks it."""
    monkeypatch.setattr(signing, "REMEMBERED_ROOTS", 2)
    records = batches("admitter", [3])
    check, counting = elsewhere(monkeypatch)
    assert check.signers_of(records[:1]) == ["admitter"]
    for other in (batches("placer", [2]), batches("placer", [2])):  # whole batches: the first one is forgotten
        assert check.signers_of(other) == ["placer", "placer"]
    topic, partition, value, headers = records[1]
    garbage = (topic, partition, value, [(n, b"\x00" * 64 if n == signing.SIGNATURE else v) for n, v in headers])
    assert check.signers_of([garbage]) == [None]
    assert check.signers_of(records[1:]) == ["admitter", "admitter"]
