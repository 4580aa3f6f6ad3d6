"""`gangway kafka start|stop|status`: run the local Kafka cluster from the terminal, no Docker needed."""

from __future__ import annotations

import argparse
import logging
import sys
import time

from events.broker import KafkaSetupError, LocalKafka, default_data_dir

EXIT_DOWN = 3
EXIT_DEGRADED = 4


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    start = actions.add_parser("start", help="start the cluster (idempotent) and print KAFKA_BOOTSTRAP_SERVERS=...")
    start.add_argument("--nodes", type=int, choices=(1, 3), default=None,
                       help="combined broker+controller nodes (default 1, or what the data dir already holds)")
    start.add_argument("--port", type=int, default=None,
                       help="base port (default 9092, or the last one used): node i listens on PORT+2i, its controller on PORT+2i+1")
    start.add_argument("--timeout", type=float, default=90.0, help="seconds to wait for the cluster to answer")
    start.add_argument("--no-sasl", action="store_true",
                       help="a new cluster without SASL/SCRAM and ACLs (plaintext, anyone on 127.0.0.1 may write "
                            "anything). By default a new cluster authenticates every client and authorizes it by "
                            "ACLs; its principals' secrets are in <data dir>/principals.json (`gangway principal`)")
    for action in (start, actions.add_parser("stop", help="stop the cluster (SIGTERM, SIGKILL after a grace)"),
                   actions.add_parser("status", help="print bootstrap servers and node pids; exit 0 if up, 4 if degraded (serving "
                                                       "without some nodes), 3 if down")):
        action.add_argument("--data-dir", default=None,
                            help=f"cluster data and state (default $GANGWAY_KAFKA_DATA or {default_data_dir()})")


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="gangway: %(message)s", stream=sys.stderr)
    try:
        if args.action == "start":
            return _start(args)
        kafka = LocalKafka(data_dir=args.data_dir)
        if args.action == "stop":
            kafka.stop()
            print(f"gangway: Kafka in {kafka.data_dir} stopped", file=sys.stderr)
            return 0
        return _status(kafka)
    except KafkaSetupError as error:
        print(f"gangway: {error}", file=sys.stderr)
        return 1


def _start(args: argparse.Namespace) -> int:
    kafka = LocalKafka(data_dir=args.data_dir, nodes=args.nodes, port=args.port, sasl=False if args.no_sasl else None)
    began = time.monotonic()
    bootstrap = kafka.start(timeout=args.timeout, log=logging.getLogger("gangway"))
    security = "SASL/SCRAM + ACLs, principals in principals.json" if kafka.sasl else "plaintext, no ACLs"
    print(f"gangway: {len(kafka.nodes)}-node Kafka answering after {time.monotonic() - began:.1f} s ({security}; "
          f"data: {kafka.data_dir})", file=sys.stderr)
    print(f"KAFKA_BOOTSTRAP_SERVERS={bootstrap}")  # stdout carries only this, so `eval "$(gangway kafka start)"` works
    return 0


def _status(kafka: LocalKafka) -> int:
    status = kafka.status()
    print(f"KAFKA_BOOTSTRAP_SERVERS={status.bootstrap_servers}")
    for node in status.nodes:
        state = "running" if node.alive else "stopped"
        print(f"node {node.node_id}: 127.0.0.1:{node.port} (controller {node.controller_port}) pid {node.pid or '-'} {state}")
    if status.up:
        verdict, code = "up", 0
    elif status.degraded:
        missing = ", ".join(str(n) for n in status.missing)
        verdict, code = f"degraded: serving without node{'s' if len(status.missing) > 1 else ''} {missing}", EXIT_DEGRADED
    else:
        verdict, code = "down", EXIT_DOWN
    print(f"cluster {status.cluster_id or '(never started)'}: {verdict} (data: {status.data_dir})")
    return code

