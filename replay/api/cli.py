"""`gangway api`: the read-model projector and the HTTP API with its dashboard, in one process.

The projector follows the cells' logs into a RocksDB read model (resuming where it stopped) on a thread of
its own; uvicorn serves the API on 127.0.0.1 unless told otherwise. Example:

    gangway api --tokens tokens.yaml --port 8080      # then open http://127.0.0.1:8080/#token=<a token>
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from pathlib import Path

from events.topics import cells_from_env
from projections.readmodel.projector import Projector
from projections.readmodel.store import ReadModelStore
from replay.api.auth import TokenFileError, Tokens
from replay.api.stream import StreamHub
from services.policies import CATALOGUE, policy

TOKENS_EXAMPLE = "operator: <operator token>\nteams:\n  <team>: <team token>"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = ("example:\n  gangway api --tokens tokens.yaml --port 8080\n  open http://127.0.0.1:8080/#token=<token>"
                     f"\n\ntokens file (YAML, tokens of 8+ characters):\n  {TOKENS_EXAMPLE.replace(chr(10), chr(10) + '  ')}")
    parser.add_argument("--port", type=int, default=8080, help="default 8080")
    parser.add_argument("--host", default="127.0.0.1", help="default 127.0.0.1 (this machine only)")
    parser.add_argument("--tokens", type=Path, default=Path("~/.gangway/api-tokens.yaml"),
                        help="read tokens file (default ~/.gangway/api-tokens.yaml)")
    parser.add_argument("--db", type=Path, default=Path("~/.gangway/readmodel"),
                        help="the read model's RocksDB directory (default ~/.gangway/readmodel); folded from offset 0 "
                             "when new, resumed otherwise")
    parser.add_argument("--cells", default=",".join(cells_from_env()),
                        help="comma-separated cells, in partition order (default: $GANGWAY_CELLS or cell-a)")
    parser.add_argument("--policy", default="gangway", choices=sorted(CATALOGUE),
                        help="the policy whose admission order and backfill the queue estimates assume")
    parser.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"))


def run(args: argparse.Namespace) -> int:
    # The web stack loads here, not with the module: every other `gangway` command starts 0.2 s sooner.
    import uvicorn

    from replay.api.app import create_app

    try:
        tokens = Tokens.load(args.tokens.expanduser())
    except TokenFileError as error:
        print(f"gangway api: {error}\nA tokens file looks like:\n{TOKENS_EXAMPLE}", file=sys.stderr)
        return 2
    cells = tuple(c.strip() for c in args.cells.split(",") if c.strip())
    hub = StreamHub()
    store = ReadModelStore(args.db.expanduser())
    projector = Projector(store, cells, args.bootstrap_servers, on_batch=hub.publish)
    app = create_app(projector, tokens, policy(args.policy), hub)
    stop = threading.Event()
    server = uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port, log_level="warning",
                                           timeout_graceful_shutdown=1))
    failed: list[BaseException] = []

    def follow() -> None:
        """The projector; if it fails, the API stops rather than serve a read model that no longer follows."""
        try:
            projector.follow(stop)
        except BaseException as error:
            failed.append(error)
            server.should_exit = True

    follower = threading.Thread(target=follow, name="projector", daemon=True)
    follower.start()
    print(f"gangway api: http://{args.host}:{args.port}/ (OpenAPI at /openapi.json), cells {', '.join(cells)}, "
          f"read model {args.db}", flush=True)
    try:
        server.run()
    finally:
        stop.set()
        follower.join(10)
        store.close()
    if failed:
        print(f"gangway api: the read model stopped following the log: {failed[0]}", file=sys.stderr)
        return 1
    return 0
