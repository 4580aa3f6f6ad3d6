"""Who may write what on the log: Kafka principals (SASL/SCRAM users) and the ACLs that bind each to its topics.

Kafka authorizes per topic, not per record, and a record's claimed `producer` can be forged: the identity a
reader can trust is the topic a record came from. So every writer from outside the control plane has an input
topic of its own, and only services write the cell's ordered log (events/topics.py, services/intake.py):

| principal | may write | may read |
| --- | --- | --- |
| `team.<T>` (team T's launchers) | `gangway.in.team.<T>` | the main log |
| `operator` (gangway apply, cordon) | `gangway.in.operator` | the main log |
| `agent.<N>` (node N's agent) | `gangway.in.node.<N>` | the main log |
| `fleet` (the simulated fleet, all its nodes) | `gangway.in.node.*` | the main log |
| `service.<S>` (admitter, placer, preemptor, recovery) | the main log, dead letters; its group, its transactional ids | the main log, heartbeats |
| `service.clock` | the main log (Ticks) | - |
| `service.intake` | the main log, heartbeats, dead letters | every input topic |
| `reader` (api, watch, verify, jobs) | - | every Gangway topic |
| `admin` | everything (super user; creates principals and topics) | everything |

Credentials, in order: `GANGWAY_KAFKA_USER` + `GANGWAY_KAFKA_PASSWORD` (this machine's one identity); else the
local broker's principal store (`<GANGWAY_KAFKA_DATA>/principals.json`, mode 0600, written by `gangway kafka
start` and `gangway principal add`) when the bootstrap servers are the local broker's; else none (a plaintext
broker: Docker, or one started with `--no-sasl`).
"""

from __future__ import annotations

import json
import os
import re
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

MECHANISM = "SCRAM-SHA-512"
#: PBKDF2 rounds of a principal's SCRAM credential: Kafka's least for SCRAM-SHA-512 and its tools' default. Every
#: connection's handshake computes them on the client (at 8,192 about 90 million instructions, twice 4,096's);
#: more rounds buy nothing for Gangway's passwords, 192 random bits each.
SCRAM_ITERATIONS = 4096
PRINCIPALS_FILE = "principals.json"
#: The public keys of the log's writers (events/signing.py), written beside the store for readers elsewhere.
WRITER_KEYS_FILE = "writer-keys.json"
SIGNING_KEY_ENV = "GANGWAY_SIGNING_KEY"
WRITER_KEYS_ENV = "GANGWAY_WRITER_KEYS"
ADMIN = "admin"
READER = "reader"
OPERATOR = "operator"
FLEET = "fleet"
#: Services that write the main log; `intake` takes the input topics into it.
SERVICES = ("admitter", "placer", "preemptor", "recovery", "clock", "intake")
KINDS = ("team", "agent", "service", "operator", "reader", "fleet")
_NAME = re.compile(r"^[A-Za-z0-9._-]{1,200}$")


class AuthError(RuntimeError):
    """A principal problem the user can fix; its message is one line."""


@dataclass(frozen=True)
class Credentials:
    user: str
    password: str


def team_principal(team: str) -> str:
    return f"team.{team}"


def agent_principal(node: str) -> str:
    return f"agent.{node}"


def service_principal(service: str) -> str:
    return f"service.{service}"


def principal_name(kind: str, name: str | None = None) -> str:
    """The SCRAM user of a kind of writer: `team nlp` -> team.nlp; operator, reader and fleet take no name."""
    if kind not in KINDS:
        raise AuthError(f"unknown principal kind {kind!r}: one of {', '.join(KINDS)}")
    if kind in (OPERATOR, READER, FLEET):
        return kind
    if not name or not _NAME.match(name):
        raise AuthError(f"a {kind} principal needs a name of letters, digits, '.', '_' and '-' (got {name!r})")
    if kind == "service" and name not in SERVICES:
        raise AuthError(f"unknown service {name!r}: one of {', '.join(SERVICES)}")
    return f"{kind}.{name}"


# --- the local principal store ---------------------------------------------------------------------


def _data_dir() -> Path:
    from events.broker import default_data_dir

    return default_data_dir()


def store_path(data_dir: Path | None = None) -> Path:
    return (data_dir or _data_dir()) / PRINCIPALS_FILE


def load_store(data_dir: Path | None = None) -> dict:
    """{"bootstrap": "...", "principals": {user: {"password", "token"?}}}, or {} when there is none."""
    path = store_path(data_dir)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        raise AuthError(f"cannot read the principal store {path}: {error}") from None


def save_store(store: Mapping, data_dir: Path | None = None) -> None:
    path = store_path(data_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(json.dumps(store, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)
    if store.get("signing"):  # the writers' public keys, for readers elsewhere (GANGWAY_WRITER_KEYS)
        keys, tmp = path.with_name(WRITER_KEYS_FILE), path.with_name(WRITER_KEYS_FILE + ".tmp")
        tmp.write_text(json.dumps({k: v.hex() for k, v in _public_keys(store).items()}, indent=2, sort_keys=True))
        tmp.replace(keys)  # whole or not at all, for a reader starting meanwhile


def new_secret() -> str:
    return secrets.token_urlsafe(24)


def new_signing_key() -> str:
    """An Ed25519 private key's 32 bytes, hex: what a writer of the log signs with (events/signing.py)."""
    return secrets.token_bytes(32).hex()


def credentials(principal: str | Credentials | None, bootstrap: str, data_dir: Path | None = None) -> Credentials | None:
    """The credentials a client of `bootstrap` uses as `principal` (None: admin), or None for a plaintext broker."""
    if isinstance(principal, Credentials):
        return principal
    user, password = os.environ.get("GANGWAY_KAFKA_USER"), os.environ.get("GANGWAY_KAFKA_PASSWORD")
    if user:
        if not password:
            raise AuthError("GANGWAY_KAFKA_USER is set but GANGWAY_KAFKA_PASSWORD is not")
        return Credentials(user, password)
    store = _local_store(bootstrap, data_dir)
    if not store:
        return None
    wanted = principal or ADMIN
    known = store.get("principals", {}).get(wanted)
    if known is None:
        kind, _, name = wanted.partition(".")
        hint = f"gangway principal add {kind} {name}".strip()
        raise AuthError(f"no Kafka principal {wanted!r} on the local broker: create it with `{hint}`")
    return Credentials(wanted, known["password"])


def _signer_name(principal: str) -> str | None:
    """The name a principal signs the cell's log as (events/signing.py), or None for one that does not write it."""
    if principal == ADMIN:
        return ADMIN
    kind, _, name = principal.partition(".")
    return name if kind == "service" and name in SERVICES else None


def signer(principal: str | Credentials | None, bootstrap: str, data_dir: Path | None = None):
    """The key `principal` (None: admin) signs what it writes on the log with (events/signing.py), or None for a
    principal that does not write the log or a log whose records are not signed. `GANGWAY_SIGNING_KEY`
    (`<writer>:<hex private key>`) gives this machine's key; else the local broker's principal store, when it was
    made with signing and `bootstrap` is its broker."""
    from events.signing import Signer

    given = os.environ.get(SIGNING_KEY_ENV)
    if given:
        name, _, seed = given.partition(":")
        try:
            key = bytes.fromhex(seed)
        except ValueError:
            key = b""
        if not name or len(key) != 32:
            raise AuthError(f"{SIGNING_KEY_ENV} is not '<writer>:<64 hex digits>'")
        return Signer(name, key)
    if os.environ.get("GANGWAY_KAFKA_USER"):
        return None
    store = _signing_store(bootstrap, data_dir)
    user = principal.user if isinstance(principal, Credentials) else principal or ADMIN
    seed = store.get("principals", {}).get(user, {}).get("signing_key") if store else None
    name = _signer_name(user)
    return Signer(name, bytes.fromhex(seed)) if seed and name else None


def writer_keys(bootstrap: str, data_dir: Path | None = None) -> dict[str, bytes] | None:
    """The public key of each writer of `bootstrap`'s cell logs, or None when their records are not signed:
    from the file `GANGWAY_WRITER_KEYS` names, else from the local broker's principal store."""
    path = os.environ.get(WRITER_KEYS_ENV)
    if path:
        try:
            keys = {str(name): bytes.fromhex(key) for name, key in json.loads(Path(path).read_text()).items()}
        except (OSError, ValueError, AttributeError, TypeError) as error:
            raise AuthError(f"cannot read the writers' keys {path} ({WRITER_KEYS_ENV}): {error}") from None
        wrong = sorted(name for name, key in keys.items() if len(key) != 32)
        if wrong:
            raise AuthError(f"the writers' keys {path} ({WRITER_KEYS_ENV}): {wrong[0]!r} is not a 32-byte "
                            f"Ed25519 key")
        return keys
    if os.environ.get("GANGWAY_KAFKA_USER"):
        return None
    store = _signing_store(bootstrap, data_dir)
    return _public_keys(store) if store else None


def _local_store(bootstrap: str, data_dir: Path | None) -> dict:
    """The principal store when `bootstrap` is its broker (the local one), else {}."""
    store = load_store(data_dir)
    return store if store and set(store.get("bootstrap", "").split(",")) == set(bootstrap.split(",")) else {}


def _signing_store(bootstrap: str, data_dir: Path | None) -> dict | None:
    """The local broker's store when it was made with signing, else None."""
    store = _local_store(bootstrap, data_dir)
    return store if store.get("signing") else None


def _public_keys(store: Mapping) -> dict[str, bytes]:
    from events.signing import public_key

    return {_signer_name(user): public_key(bytes.fromhex(entry["signing_key"]))
            for user, entry in sorted(store.get("principals", {}).items())
            if "signing_key" in entry and _signer_name(user)}


def client_config(bootstrap: str, principal: str | Credentials | None = None, **extra: object) -> dict:
    """A confluent-kafka config for `bootstrap` authenticated as `principal` (when the broker wants SASL)."""
    config: dict = {"bootstrap.servers": bootstrap}
    creds = credentials(principal, bootstrap)
    if creds is not None:
        config.update({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": MECHANISM,
                       "sasl.username": creds.user, "sasl.password": creds.password})
    config.update(extra)
    return config


def kafka_problem(error: Exception) -> str:
    """One line for a Kafka error; a refused authorization says which identity was refused and what to do."""
    kafka_error = error.args[0] if error.args and hasattr(error.args[0], "code") else None
    if kafka_error is None:
        return str(error)
    text = kafka_error.str()
    if kafka_error.name().endswith("AUTHORIZATION_FAILED"):
        user = os.environ.get("GANGWAY_KAFKA_USER")
        who = f"principal {user!r} (GANGWAY_KAFKA_USER)" if user else "this principal"
        return (f"the broker refused {who}: {kafka_error.name()} ({text}); each principal may write only its own "
                f"input (`gangway principal add ...` makes the one you need)")
    if kafka_error.name() == "_AUTHENTICATION" or "SASL" in text:
        return f"the broker refused to authenticate: {text} (check GANGWAY_KAFKA_USER / GANGWAY_KAFKA_PASSWORD)"
    return text


def admin_client(bootstrap: str, principal: str | Credentials | None = None):
    from confluent_kafka.admin import AdminClient

    from events.broker import quiet_logger

    return AdminClient(client_config(bootstrap, principal, logger=quiet_logger()))


# --- ACLs --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Grant:
    """One ALLOW ACL: operation on a resource (topic, group or transactional id), literal or by prefix."""

    resource: str  # "topic" | "group" | "transactional_id"
    name: str
    operation: str  # "read" | "write" | "create" | "describe"
    prefixed: bool = False


def grants(principal: str, topic_prefix: str = "", name_prefix: str = "") -> tuple[Grant, ...]:
    """Everything `principal` may do, and nothing else; topics under `topic_prefix`, group and transactional
    ids under `name_prefix` (tests isolate themselves with both)."""
    from events.topics import INPUTS, topic_names

    t = topic_names(topic_prefix)
    n = name_prefix
    inputs = topic_prefix + INPUTS
    reads_log = (Grant("topic", t.events, "read"), Grant("group", "reader-", "read", True))
    kind, _, name = principal.partition(".")
    if principal in (ADMIN,):
        return ()
    if kind == "team":
        return (Grant("topic", t.team_input(name), "write"), Grant("topic", t.team_input(name), "create"),
                Grant("transactional_id", f"{n}gangway-launcher-{principal}-", "write", True), *reads_log)
    if principal == OPERATOR:
        return (Grant("topic", t.operator_input, "write"), Grant("topic", t.operator_input, "create"),
                Grant("transactional_id", f"{n}gangway-launcher-{principal}-", "write", True), *reads_log)
    if kind == "agent":
        return (Grant("topic", t.node_input(name), "write"), Grant("topic", t.node_input(name), "create"),
                Grant("transactional_id", f"{n}gangway-agent-{name}", "write"), *reads_log)
    if principal == FLEET:
        return (Grant("topic", t.node_input(""), "write", True), Grant("topic", t.node_input(""), "create", True),
                Grant("transactional_id", f"{n}gangway-fleet-", "write", True), *reads_log)
    if principal == READER:
        return (Grant("topic", topic_prefix + "gangway.", "read", True), Grant("group", "reader-", "read", True))
    if kind == "service" and name == "clock":
        return (Grant("topic", t.events, "write"),)
    if kind == "service" and name == "intake":
        return (Grant("topic", inputs, "read", True), Grant("topic", inputs, "describe", True),
                Grant("topic", t.events, "write"), Grant("topic", t.heartbeats, "write"),
                Grant("topic", t.deadletter, "write"), Grant("group", f"{n}gangway-intake", "read"),
                Grant("transactional_id", f"{n}gangway-intake", "write", True))  # each replica its own id
    if kind == "service":
        return (Grant("topic", t.events, "read"), Grant("topic", t.events, "write"),
                Grant("topic", t.heartbeats, "read"), Grant("topic", t.deadletter, "write"),
                Grant("group", f"{n}gangway-{name}", "read"),
                Grant("transactional_id", f"{n}gangway-{name}-", "write", True), *reads_log[1:])
    raise AuthError(f"no grants for principal {principal!r}")


def _bindings(principal: str, granted: Iterable[Grant]):
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    kinds = {"topic": ResourceType.TOPIC, "group": ResourceType.GROUP, "transactional_id": ResourceType.TRANSACTIONAL_ID}
    operations = {"read": AclOperation.READ, "write": AclOperation.WRITE, "create": AclOperation.CREATE,
                  "describe": AclOperation.DESCRIBE}
    return [AclBinding(kinds[g.resource], g.name,
                       ResourcePatternType.PREFIXED if g.prefixed else ResourcePatternType.LITERAL,
                       f"User:{principal}", "*", operations[g.operation], AclPermissionType.ALLOW) for g in granted]


def create_principals(admin, principals: Mapping[str, str], topic_prefix: str = "", name_prefix: str = "",
                      timeout: float = 30.0) -> None:
    """Creates (or re-keys) SCRAM users {principal: password} and grants each exactly its ACLs. Idempotent."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    if not principals:
        return
    try:
        upserts = [UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS),
                                                password.encode())
                   for user, password in sorted(principals.items())]
        for future in admin.alter_user_scram_credentials(upserts, request_timeout=timeout).values():
            future.result(timeout=timeout)
        bindings = [b for user in sorted(principals) for b in _bindings(user, grants(user, topic_prefix, name_prefix))]
        if bindings:
            for future in admin.create_acls(bindings, request_timeout=timeout).values():
                future.result(timeout=timeout)
            _wait_for_acls(admin, principals, len(bindings), timeout)
    except KafkaException as error:
        raise AuthError(f"the broker refused to create principals: {error.args[0].str()}") from None


def _wait_for_acls(admin, principals: Iterable[str], count: int, timeout: float) -> None:
    """Until the broker's authorizer shows the new ACLs (it applies them from the metadata log, a moment later)."""
    import time

    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    wanted = {f"User:{p}" for p in principals}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = admin.describe_acls(AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                                     AclOperation.ANY, AclPermissionType.ANY),
                                    request_timeout=timeout).result(timeout=timeout)
        if sum(1 for b in found if b.principal in wanted) >= count:
            return
        time.sleep(0.1)


def add_principals(bootstrap: str, names: Sequence[str], topic_prefix: str = "", name_prefix: str = "",
                   data_dir: Path | None = None, admin: Credentials | None = None) -> dict[str, dict]:
    """Creates principals on the broker as admin and records them in the local store; returns their entries
    (password, and for teams and the operator an API token). An existing principal keeps its secrets."""
    store = load_store(data_dir)
    if not store:
        raise AuthError("no principal store: `gangway principal add` works on the local broker started with "
                        "`gangway kafka start` (elsewhere create SCRAM users and ACLs with your Kafka tooling)")
    known = store.setdefault("principals", {})
    entries = {}
    for name in names:
        entry = known.get(name) or {"password": new_secret()}
        if (name.startswith("team.") or name == OPERATOR) and "token" not in entry:
            entry["token"] = new_secret()
        if store.get("signing") and _signer_name(name) and "signing_key" not in entry:
            entry["signing_key"] = new_signing_key()
        entries[name] = known[name] = entry
    if admin is None and ADMIN in known:
        admin = Credentials(ADMIN, known[ADMIN]["password"])
    create_principals(admin_client(bootstrap, admin or ADMIN), {n: e["password"] for n, e in entries.items()},
                      topic_prefix, name_prefix)
    save_store(store, data_dir)
    return entries


def api_tokens(data_dir: Path | None = None) -> dict:
    """The read-model API's tokens file as data, from the principal store: team.T's token is team T's."""
    principals = load_store(data_dir).get("principals", {})
    teams = {name.removeprefix("team."): e["token"] for name, e in sorted(principals.items())
             if name.startswith("team.") and "token" in e}
    out: dict = {"teams": teams}
    if OPERATOR in principals and "token" in principals[OPERATOR]:
        out["operator"] = principals[OPERATOR]["token"]
    return out
