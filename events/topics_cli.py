"""`gangway topics`: create Gangway's topics (idempotently) and print the catalogue as the cluster holds it."""

from __future__ import annotations

import argparse
import os
import sys

from events.arguments import within
from events.auth import AuthError, admin_client
from events.broker import cluster_node_ids
from events.topics import TopicError, cell_partition, cells_from_env, describe_topics, ensure_topics, validate_cells


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"),
                        help="Kafka to talk to (default $KAFKA_BOOTSTRAP_SERVERS or 127.0.0.1:9092)")
    parser.add_argument("--cells", default=None,
                        help="comma-separated ordered cell names, cell i = partition i (default $GANGWAY_CELLS or cell-a)")
    parser.add_argument("--replication-factor", type=int, default=None,
                        help="replicas per partition (default: 3 if the cluster has 3+ brokers, else 1)")
    parser.add_argument("--timeout", type=within(float, 0), default=30.0, help="seconds to wait for the cluster")


def run(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    try:
        cells = validate_cells([c.strip() for c in args.cells.split(",") if c.strip()]) if args.cells else cells_from_env()
        brokers = cluster_node_ids(args.bootstrap_servers, timeout=min(args.timeout, 10.0))
        if not brokers:
            print(f"gangway: Kafka does not answer at {args.bootstrap_servers} (start one with `gangway kafka start`)", file=sys.stderr)
            return 1
        rf = args.replication_factor or (3 if len(brokers) >= 3 else 1)
        admin = admin_client(args.bootstrap_servers)
        specs = ensure_topics(admin, cells, rf, timeout=args.timeout)
        states = describe_topics(admin, specs, timeout=args.timeout)
    except (TopicError, AuthError) as error:
        print(f"gangway: {error}", file=sys.stderr)
        return 1
    except KafkaException as error:
        print(f"gangway: Kafka at {args.bootstrap_servers} refused: {error.args[0].str()}", file=sys.stderr)
        return 1
    width = max(len(s.name) for s in states)
    print(f"{'topic':<{width}}  partitions  rf  configs")
    for spec, state in zip(specs, states):
        configs = " ".join(f"{k}={v}" for k, v in state.config.items())
        print(f"{state.name:<{width}}  {state.partitions:>10}  {state.replication_factor:>2}  {configs}")
        print(f"{'':<{width}}  {spec.purpose}")
    print("cells: " + ", ".join(f"{cell}=partition {cell_partition(cells, cell)}" for cell in cells))
    return 0

