"""Who wrote a record of a cell's log, proven: every writer of the log signs what it writes, and every reader
checks the signature against the writer the record claims before the record is folded.

Kafka authorizes per topic, so any service principal may write the cell's log and a record's `producer` is
only a claim (events/auth.py). Each writer of the log (the four deciders, the clock, the intake, the admin)
holds an Ed25519 key (PyNaCl: libsodium) in the principal store. A transaction signs, per partition it writes,
one Merkle root over the SHA-256 of its records' values; each record carries the signature, the batch and its
path to the root (headers `gw-signer`, `gw-batch`, `gw-sig`, `gw-path`), so a reader starting anywhere in the
log checks any record alone, and pays one signature check per batch (the batches it has checked are remembered).

A writer also chains its batches: each signs, besides its root, the digest of the message its writer signed last
on the same partition with the same key (header `gw-prev`). A reader that has checked a batch therefore knows
the batch before it authentic without checking its signature; reading a run of records newest first
(`Verifier.signers_of`), a run of a writer's batches costs one signature check. A link to a batch no reader sees
(an aborted transaction) or no link (a writer's first batch since it started) costs only that batch's own check.

A record its claimed writer did not sign (unsigned, another writer's key, a value changed after signing) is
marked `origin = "unverified/<signer>"`: the fold refuses it as NOT_ITS_WRITER (projections/validate.py), on
every reader alike. Who may sign what (`vouched`): a service its own decisions, the clock Ticks, the intake
the inputs it takes in, the admin anything. Signing is on when the principal store was made with it (`gangway
kafka start` on a new data directory); a plaintext broker has no store, no keys and no signatures.
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from events.models import UNVERIFIED, Event, Tick

SIGNER, BATCH, SIGNATURE, PATH, PREVIOUS = "gw-signer", "gw-batch", "gw-sig", "gw-path", "gw-prev"
#: The headers every signed record carries; a chained one also carries PREVIOUS.
REQUIRED_HEADERS = (SIGNER, BATCH, SIGNATURE, PATH)
SIGNATURE_HEADERS = (*REQUIRED_HEADERS, PREVIOUS)
ADMIN = "admin"
INTAKE = "intake"
CLOCK = "clock"
#: How many authentic batches a reader remembers (a batch's other records then cost hashes, not a signature check).
REMEMBERED_ROOTS = 4096
_DIGEST = 32


class Unvouched(ValueError):
    """A record whose signature does not vouch for it, where it is dropped rather than refused."""


Headers = Sequence[tuple[str, bytes | str]]


def _leaf(value: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + value).digest()


def _node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _message(signer: str, batch: bytes, topic: str, partition: int, count: int, root: bytes,
             previous: bytes | None) -> bytes:
    """What a batch's signature signs: version 2 when it chains to its writer's previous message, else version 1."""
    fields = f"{signer}\x00{topic}\x00{partition}\x00{count}\x00".encode() + batch + root
    if previous is None:
        return b"gangway-log-sig/1\x00" + fields
    return b"gangway-log-sig/2\x00" + fields + previous


def _digest(message: bytes) -> bytes:
    return hashlib.sha256(message).digest()


def _top(leaves: list[bytes]) -> bytes:
    """The Merkle root over `leaves` (at least one): `_levels(leaves)[-1][0]`, the smallest trees made directly."""
    if len(leaves) > 3:
        return _levels(leaves)[-1][0]
    if len(leaves) == 1:
        return leaves[0]
    pair = _node(leaves[0], leaves[1])
    return pair if len(leaves) == 2 else _node(pair, leaves[2])


def _levels(leaves: list[bytes]) -> list[list[bytes]]:
    """The Merkle tree bottom up; an odd node out is carried up unpaired."""
    levels = [leaves]
    below = leaves
    while len(below) > 1:
        above = [_node(left, right) for left, right in zip(below[::2], below[1::2])]
        if len(below) & 1:
            above.append(below[-1])
        levels.append(above)
        below = above
    return levels


def _climb(leaf: bytes, index: int, count: int, path: bytes, levels: int) -> tuple[list[bytes], list[int]] | None:
    """The nodes `leaf` at `index` of `count` leads to along `path`, one a level up to `levels` levels or the root
    (the leaf first), and where in the path each level's sibling starts (the last: where the climb stopped); None
    when the path runs out."""
    nodes, starts = [leaf], [0]
    node, at = leaf, 0
    while count > 1 and levels:
        sibling = index ^ 1
        if sibling < count:
            if at + _DIGEST > len(path):
                return None
            other = path[at:at + _DIGEST]
            at += _DIGEST
            node = _node(other, node) if index & 1 else _node(node, other)
        index //= 2
        count = (count + 1) // 2
        levels -= 1
        nodes.append(node)
        starts.append(at)
    return nodes, starts


def _walk(leaf: bytes, index: int, count: int, path: bytes) -> tuple[list[bytes], list[int]] | None:
    """`_climb` to the root (the last node), or None when the path does not fit."""
    way = _climb(leaf, index, count, path, count)
    return way if way is not None and way[1][-1] == len(path) else None


class _Walked(NamedTuple):
    """A record of a batch found authentic along its path: the next record of the batch with the same signature
    climbs only to where the two paths meet (`Verifier._alone`)."""

    position: int  # its index in the batch
    nodes: list[bytes]
    starts: list[int]
    path: bytes
    signature: bytes
    signer: str


def _met(leaf: bytes, index: int, count: int, path: bytes, walked: _Walked) -> _Walked | None:
    """Where the record at `index` of `walked`'s batch climbs to the level its way up meets `walked`'s and finds
    the node there and the rest of its path the same as `walked`'s: its own walk, made of its climb and the rest of
    `walked`'s. None otherwise (its whole path is then walked)."""
    meet = (index ^ walked.position).bit_length()
    way = _climb(leaf, index, count, path, meet)
    if way is None:
        return None
    nodes, starts = way
    node, at = nodes[-1], starts[-1]
    start = walked.starts[meet]
    if node != walked.nodes[meet] or path[at:] != walked.path[start:]:
        return None
    shift = at - start
    return _Walked(index, nodes + walked.nodes[meet + 1:], starts + [s + shift for s in walked.starts[meet + 1:]],
                   path, walked.signature, walked.signer)


@dataclass(frozen=True)
class Signer:
    """A writer's name on the log and its private key."""

    name: str
    seed: bytes  # the Ed25519 private key's 32 bytes

    def sign(self, topic: str, partition: int, values: Sequence[bytes]) -> list[list[tuple[str, bytes]]]:
        """The signature headers for each of a transaction's records in one partition, in order."""
        if not values:
            return []
        batch = os.urandom(8)
        levels = _levels([_leaf(v) for v in values])
        count = len(values)
        key = _private_key(self.seed)
        chain = (self.name, self.seed, topic, partition)
        previous = _last_signed.get(chain)
        message = _message(self.name, batch, topic, partition, count, levels[-1][0], previous)
        signature = key.sign(message).signature
        _last_signed[chain] = digest = _digest(message)
        _signed_here[digest] = (bytes(key.verify_key), signature)
        if len(_signed_here) > REMEMBERED_ROOTS:
            _signed_here.popitem(last=False)
        name = self.name.encode()
        linked = [(PREVIOUS, previous)] if previous is not None else []
        return [[(SIGNER, name), (BATCH, batch), (SIGNATURE, signature),
                 (PATH, struct.pack(">II", i, count) + _siblings(levels, i)), *linked] for i in range(count)]


#: The digests of the messages this process signed, with the public key that signed each and the signature: a
#: reader reading back what its own process wrote (a service its decisions) takes them without checking again.
_signed_here: OrderedDict[bytes, tuple[bytes, bytes]] = OrderedDict()
#: Per writer, key, topic and partition, the digest of the message this process signed last: the next one's link.
#: Keyed by the key too, so a batch never links to one signed in the same name with another key.
_last_signed: dict[tuple[str, bytes, str, int], bytes] = {}


@lru_cache(maxsize=16)
def _private_key(seed: bytes):
    """The key object (deriving it from the seed costs as much as a signature)."""
    from nacl.signing import SigningKey

    return SigningKey(seed)


def _siblings(levels: list[list[bytes]], index: int) -> bytes:
    out = []
    for level in levels[:-1]:
        sibling = index ^ 1
        if sibling < len(level):
            out.append(level[sibling])
        index //= 2
    return b"".join(out)


class Claim(NamedTuple):
    """What a record's signature headers claim: who signed which batch of which partition, and where in it the
    record's value (its leaf) sits."""

    topic: str
    partition: int
    signer: str
    batch: bytes
    count: int
    previous: bytes | None
    signature: bytes
    index: int
    path: bytes  # the header as written: index and count, then the siblings on the way to the root
    leaf: bytes


_LEAF = Claim._fields.index("leaf")
#: A claim's first fields, what every record of one batch claims alike: `claim[:_KEY]` is its batch's key.
_KEY = Claim._fields.index("previous") + 1
_COUNT = Claim._fields.index("count")
_POSITION = struct.Struct(">II")  # a path header's index and count
_new_claim = tuple.__new__  # a Claim from its fields in one tuple, without the keyword handling of Claim(...)


def _claim(topic: str, partition: int, value: bytes | None, headers: Headers) -> Claim | None:
    """The record's claim, or None when its headers claim nothing well formed (or a signature header twice)."""
    if value is None:
        return None
    if len(headers) == 5:  # a chained record's five, read by position when they come as `Signer.sign` writes them
        (s, signer), (b, batch), (g, signature), (p, path), (v, previous) = headers
        linked = s == SIGNER and b == BATCH and g == SIGNATURE and p == PATH and v == PREVIOUS
    else:
        linked = False
    if not linked:
        found = dict(headers)
        if len(found) < len(headers) and _twice(headers):
            return None  # two signatures: neither is taken
        if SIGNER not in found or BATCH not in found or SIGNATURE not in found or PATH not in found:
            return None
        signer, batch, signature, path = found[SIGNER], found[BATCH], found[SIGNATURE], found[PATH]
        linked = PREVIOUS in found
        previous = found[PREVIOUS] if linked else None
    if not (type(signer) is type(batch) is type(signature) is type(path) is bytes
            and (not linked or type(previous) is bytes)):  # a header of no value or of text: as its bytes
        signer, batch, signature, path = _bytes(signer), _bytes(batch), _bytes(signature), _bytes(path)
        previous = _bytes(previous) if linked else None
    if len(path) < 8 or previous is not None and len(previous) != _DIGEST:
        return None
    index, count = _POSITION.unpack_from(path)
    if not index < count:
        return None
    try:
        name = signer.decode()
    except UnicodeDecodeError:
        return None
    return _new_claim(Claim, (topic, partition, name, batch, count, previous, signature, index, path, _leaf(value)))


def _twice(headers: Headers) -> bool:
    """Whether a signature header comes more than once."""
    names = [name for name, _ in headers if name in SIGNATURE_HEADERS]
    return len(names) > len(set(names))


def _bytes(raw: bytes | str | None) -> bytes:
    return raw if isinstance(raw, bytes) else str(raw).encode()


def _whole_batches(claims: Sequence[Claim | None]) -> list[list[int]]:
    """The positions among `claims` of each batch (of more than one record) whose every record is there exactly
    once, in the batch's order. A copy of a record spoils its batch: its records are then checked alone."""
    batches: dict[tuple, dict[int, int | None]] = {}  # batch's key -> {index: position}
    for at, claim in enumerate(claims):
        if claim is not None and claim.count > 1:
            key = claim[:_KEY]  # its batch's key
            members = batches.get(key)
            if members is None:
                batches[key] = members = {}
            index = claim.index
            members[index] = None if index in members else at
    return [[members[i] for i in range(key[_COUNT])] for key, members in batches.items()
            if len(members) == key[_COUNT] and None not in members.values()]


class Verifier:
    """Checks records' signatures against the writers' public keys; remembers the batches it knows authentic."""

    def __init__(self, public_keys: Mapping[str, bytes]) -> None:
        from nacl.signing import VerifyKey

        self._public = dict(public_keys)
        self._keys = {name: VerifyKey(key) for name, key in public_keys.items()}
        #: digests of messages checked or chained to -> the writer that vouches for each: a link proves a message
        #: only in the name of the writer whose authentic message links to it, never in another writer's name
        self._authentic_messages: OrderedDict[bytes, str] = OrderedDict()
        #: per batch (a claim's key), the record of it found authentic along its path last
        self._walked: dict[tuple, _Walked] = {}

    @property
    def writers(self) -> list[str]:
        return sorted(self._keys)

    def signer_of(self, topic: str, partition: int, value: bytes | None, headers: Headers) -> str | None:
        """The writer whose valid signature the record carries, or None."""
        return self.signers_of([(topic, partition, value, headers)])[0]

    def signers_of(self, records: Sequence[tuple[str, int, bytes | None, Headers]]) -> list[str | None]:
        """`signer_of` each of (topic, partition, value, headers), in log order. They are checked newest first, so
        a batch found authentic vouches for the one its writer chained before it, and a run of a writer's batches
        costs one signature check. A batch whose every record is among them is checked once, on the root its
        records' values make, rather than record by record along each one's path."""
        claims = [_claim(*record) for record in records]
        whole = _whole_batches(claims)
        grouped = {at for positions in whole for at in positions}
        units = whole + [[at] for at in range(len(records)) if at not in grouped]
        out: list[str | None] = [None] * len(records)
        authentic, alone = self._authentic, self._alone
        for positions in sorted(units, key=max, reverse=True):  # newest first
            if len(positions) == 1:
                out[positions[0]] = alone(claims[positions[0]])
                continue
            signer = authentic(claims[max(positions)], _top([claims[at][_LEAF] for at in positions]))
            for at in positions:
                out[at] = signer if signer is not None else alone(claims[at])
        return out

    def _alone(self, claim: Claim | None) -> str | None:
        """A record checked on its own: its value's leaf along its path to the batch's root. Where a record of the
        same batch was found authentic before (a batch split between polls), the two ways up meet at the level
        of their indices' highest differing bit: this record climbs only to there, and is authentic when the node
        it reaches is the one found there and the rest of its path is the rest of that one's. Its whole walk
        would hash exactly what that one's did from there on, so the answer is the same, with fewer hashes. Only a
        record carrying the same signature takes the shortcut: a copy with another one is judged on it as before."""
        if claim is None:
            return None
        batch = claim[:_KEY]
        path = claim.path[8:]
        walked = self._walked.get(batch)
        if walked is not None and walked.signature == claim.signature:
            met = _met(claim.leaf, claim.index, claim.count, path, walked)
            if met is not None:
                self._walked[batch] = met
                return walked.signer
        way = _walk(claim.leaf, claim.index, claim.count, path)
        if way is None:
            return None
        signer = self._authentic(claim, way[0][-1])
        if signer is not None:
            if len(self._walked) >= REMEMBERED_ROOTS:
                self._walked.clear()
            self._walked[batch] = _Walked(claim.index, way[0], way[1], path, claim.signature, signer)
        return signer

    def _authentic(self, claim: Claim, root: bytes) -> str | None:
        """The claimed signer, when the batch it claims, with `root`, is known authentic, chained to from an
        authentic batch, signed by this process, or signed as it says; else None."""
        key = self._keys.get(claim.signer)
        if key is None:
            return None
        topic, partition, signer, batch, count, previous = claim[:_KEY]
        message = _message(signer, batch, topic, partition, count, root, previous)
        digest = hashlib.sha256(message).digest()
        if self._authentic_messages.get(digest) == signer:
            self._authentic_messages.move_to_end(digest)
        elif _signed_here.get(digest) != (self._public[claim.signer], claim.signature):  # not signed here with it
            if not self._checks(key, message, claim.signature):
                return None
            self._remember(digest, claim.signer)
        if previous is not None:
            self._remember(previous, signer)  # the writer's own word, in an authentic message
        return signer

    @staticmethod
    def _checks(key, message: bytes, signature: bytes) -> bool:
        from nacl.exceptions import BadSignatureError

        try:
            key.verify(message, signature)
        except (BadSignatureError, ValueError, TypeError):  # a wrong signature, or not 64 bytes of one
            return False
        return True

    def _remember(self, digest: bytes, writer: str) -> None:
        self._authentic_messages[digest] = writer
        self._authentic_messages.move_to_end(digest)
        if len(self._authentic_messages) > REMEMBERED_ROOTS:
            self._authentic_messages.popitem(last=False)


def may_write(signer: str | None, event: Event) -> bool:
    """Whether `signer` may write `event` onto a cell's log."""
    if signer is None:
        return False
    if signer == ADMIN:
        return True
    if event.is_decision:
        return signer == event.envelope.producer
    if isinstance(event, Tick):
        return signer == CLOCK
    return signer == INTAKE


def vouched(event: Event, signer: str | None) -> Event:
    """The event as the cell may fold it: itself when its signer may write it, else marked unverified (refused)."""
    if may_write(signer, event):
        return event
    envelope = event.envelope.model_copy(update={"origin": f"{UNVERIFIED}{signer or 'unsigned'}"})
    return event.model_copy(update={"envelope": envelope})


def new_seed() -> bytes:
    return os.urandom(32)


def public_key(seed: bytes) -> bytes:
    return bytes(_private_key(seed).verify_key)
