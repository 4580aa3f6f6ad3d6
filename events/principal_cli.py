"""`gangway principal add|list|tokens`: the Kafka identities of teams' launchers, agents, services and readers.

Each principal is a SASL/SCRAM user with exactly the ACLs of its kind (events/auth.py). On the local broker
(`gangway kafka start`) the passwords live in the principal store, `<data dir>/principals.json` (mode 0600),
and every `gangway` command on this machine picks the principal it needs from there. Elsewhere give a process
its one identity with GANGWAY_KAFKA_USER and GANGWAY_KAFKA_PASSWORD.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from events.auth import (
    KINDS,
    OPERATOR,
    SIGNING_KEY_ENV,
    WRITER_KEYS_ENV,
    WRITER_KEYS_FILE,
    AuthError,
    add_principals,
    api_tokens,
    load_store,
    principal_name,
)
from events.topics import topic_prefix

example = "gangway principal add team nlp vision && gangway principal add agent n1 n2 n3"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    add = actions.add_parser(
        "add", help="create principals (idempotent) and print each one's user, password and API token",
        description="Creates SASL/SCRAM users with their ACLs on the local broker, as its admin. Kinds: team NAME... "
                    "(writes team NAME's submissions and cancels), agent NODE... (its node's facts), operator "
                    "(configuration and cordons), reader (reads every topic), fleet (the simulated fleet: every "
                    "node), service NAME... (admitter, placer, preemptor, recovery, clock, intake). Services, "
                    "operator, reader and fleet exist from `gangway kafka start` on. A service also gets the key it "
                    "signs the cells' log with (printed as GANGWAY_SIGNING_KEY; readers elsewhere check records "
                    "against writer-keys.json beside the store, GANGWAY_WRITER_KEYS).")
    add.add_argument("kind", choices=KINDS)
    add.add_argument("names", nargs="*", help="team names, node names or service names")
    add.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"))
    add.add_argument("--json", action="store_true", help="print the entries as JSON")
    actions.add_parser("list", help="the principals in the local store (no secrets)")
    actions.add_parser("tokens", help="print a tokens file for `gangway api --tokens` from the store: each team's "
                                      "token is its team principal's, the operator's the operator's")


def run(args: argparse.Namespace) -> int:
    try:
        if args.action == "add":
            return _add(args)
        if args.action == "list":
            for name in sorted(load_store().get("principals", {})):
                print(name)
            return 0
        print(json.dumps(api_tokens(), indent=2))
        return 0
    except AuthError as error:
        print(f"gangway principal: {error}", file=sys.stderr)
        return 1


def _add(args: argparse.Namespace) -> int:
    takes_names = args.kind in ("team", "agent", "service")
    if takes_names and not args.names:
        print(f"gangway principal add {args.kind}: name at least one {args.kind}", file=sys.stderr)
        return 2
    if not takes_names and args.names:
        print(f"gangway principal add {args.kind}: takes no names", file=sys.stderr)
        return 2
    names = [principal_name(args.kind, n) for n in args.names] if takes_names else [principal_name(args.kind)]
    prefix = topic_prefix()
    entries = add_principals(args.bootstrap_servers, names, topic_prefix=prefix, name_prefix=prefix)
    if args.json:
        print(json.dumps(entries, indent=2, sort_keys=True))
        return 0
    for name, entry in entries.items():
        token = f"  api-token={entry['token']}" if "token" in entry else ""
        key = f" {SIGNING_KEY_ENV}={name.removeprefix('service.')}:{entry['signing_key']}" if "signing_key" in entry else ""
        print(f"{name}  GANGWAY_KAFKA_USER={name} GANGWAY_KAFKA_PASSWORD={entry['password']}{key}{token}")
    if any("signing_key" in e for e in entries.values()):
        print(f"(a machine that reads the cells' log checks records against {WRITER_KEYS_FILE} beside the principal "
              f"store: {WRITER_KEYS_ENV}=<its path>)", file=sys.stderr)
    if any(n.startswith("team.") or n == OPERATOR for n in names):
        print("(`gangway principal tokens > tokens.json` writes the API's tokens file)", file=sys.stderr)
    return 0
