"""Who wrote a record of a cell's log, proven: every writer of the log signs what it writes, and every reader
checks the signature against the writer the record claims before the record is folded.

Kafka authorizes per topic, so any service principal may write the cell's log and a record's `producer` is
only a claim (events/auth.py). Each writer of the log (the four deciders, the clock, the intake, the admin)
holds an Ed25519 key (PyNaCl: libsodium) in the principal store. A transaction signs, per partition it writes,
one Merkle root over the SHA-256 of its records' values; each record carries the signature, the batch and its
path to the root (headers `gw-signer`, `gw-batch`, `gw-sig`, `gw-path`), so a reader starting anywhere in the
log checks any record alone, and pays one signature check per batch (the roots it has checked are remembered).

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

from events.models import UNVERIFIED, Event, Tick

SIGNER, BATCH, SIGNATURE, PATH = "gw-signer", "gw-batch", "gw-sig", "gw-path"
SIGNATURE_HEADERS = (SIGNER, BATCH, SIGNATURE, PATH)
ADMIN = "admin"
INTAKE = "intake"
CLOCK = "clock"
#: How many checked roots a reader remembers (a batch's later records then cost hashes, not a signature check).
REMEMBERED_ROOTS = 4096
_DIGEST = 32


class Unvouched(ValueError):
    """A record whose signature does not vouch for it, where it is dropped rather than refused."""


Headers = Sequence[tuple[str, bytes | str]]


def _leaf(value: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + value).digest()


def _node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _message(signer: str, batch: bytes, topic: str, partition: int, count: int, root: bytes) -> bytes:
    return b"gangway-log-sig/1\x00" + f"{signer}\x00{topic}\x00{partition}\x00{count}\x00".encode() + batch + root


def _levels(leaves: list[bytes]) -> list[list[bytes]]:
    """The Merkle tree bottom up; an odd node out is carried up unpaired."""
    levels = [leaves]
    while len(levels[-1]) > 1:
        below = levels[-1]
        levels.append([_node(below[i], below[i + 1]) if i + 1 < len(below) else below[i]
                       for i in range(0, len(below), 2)])
    return levels


def _root(leaf: bytes, index: int, count: int, path: bytes) -> bytes | None:
    """The root `leaf` at `index` of `count` leads to along `path`, or None when the path does not fit."""
    node, at = leaf, 0
    while count > 1:
        sibling = index ^ 1
        if sibling < count:
            if at + _DIGEST > len(path):
                return None
            other = path[at:at + _DIGEST]
            at += _DIGEST
            node = _node(other, node) if index & 1 else _node(node, other)
        index //= 2
        count = (count + 1) // 2
    return node if at == len(path) else None


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
        signature = key.sign(_message(self.name, batch, topic, partition, count, levels[-1][0])).signature
        _signed_here[(self.name, batch, topic, partition, count, levels[-1][0], signature)] = bytes(key.verify_key)
        if len(_signed_here) > REMEMBERED_ROOTS:
            _signed_here.popitem(last=False)
        name = self.name.encode()
        return [[(SIGNER, name), (BATCH, batch), (SIGNATURE, signature),
                 (PATH, struct.pack(">II", i, count) + _siblings(levels, i))] for i in range(count)]


#: The roots this process signed, with the public key of the key that signed each: a reader reading back what its
#: own process wrote (a service its decisions) takes them without checking the signature again.
_signed_here: OrderedDict[tuple, bytes] = OrderedDict()


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


class Verifier:
    """Checks records' signatures against the writers' public keys; remembers the roots it has checked."""

    def __init__(self, public_keys: Mapping[str, bytes]) -> None:
        from nacl.signing import VerifyKey

        self._public = dict(public_keys)
        self._keys = {name: VerifyKey(key) for name, key in public_keys.items()}
        self._checked: OrderedDict[tuple, None] = OrderedDict()

    @property
    def writers(self) -> list[str]:
        return sorted(self._keys)

    def signer_of(self, topic: str, partition: int, value: bytes | None, headers: Headers) -> str | None:
        """The writer whose valid signature the record carries, or None."""
        from nacl.exceptions import BadSignatureError

        found: dict[str, bytes] = {}
        for name, raw in headers:
            if name in SIGNATURE_HEADERS:
                if name in found:
                    return None  # two signatures: neither is taken
                found[name] = raw if isinstance(raw, bytes) else str(raw).encode()
        if len(found) < len(SIGNATURE_HEADERS) or value is None:
            return None
        path = found[PATH]
        if len(path) < 8:
            return None
        index, count = struct.unpack(">II", path[:8])
        if not index < count:
            return None
        try:
            signer = found[SIGNER].decode()
        except UnicodeDecodeError:
            return None
        key = self._keys.get(signer)
        root = _root(_leaf(value), index, count, path[8:])
        if key is None or root is None:
            return None
        checked = (signer, found[BATCH], topic, partition, count, root, found[SIGNATURE])
        if checked in self._checked:
            self._checked.move_to_end(checked)
            return signer
        if _signed_here.get(checked) == self._public[signer]:
            return signer  # this process signed that root with the writer's own key: no need to check it again
        try:
            key.verify(_message(signer, found[BATCH], topic, partition, count, root), found[SIGNATURE])
        except (BadSignatureError, ValueError, TypeError):  # a wrong signature, or not 64 bytes of one
            return None
        self._checked[checked] = None
        if len(self._checked) > REMEMBERED_ROOTS:
            self._checked.popitem(last=False)
        return signer


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
