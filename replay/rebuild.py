"""`gangway projection`: rebuild a cell's projection from offset 0 of its log into RocksDB, and
compare two projections — the check that a live projection is exactly a fold of the log."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from events.arguments import count
from events.reader import LogReader
from events.topics import cells_from_env
from projections.cell import CellState
from projections.evolve import evolve
from projections.snapshot import OutdatedSnapshot, dump
from projections.store import ProjectionStore


def rebuild(bootstrap: str, cell: str, store: ProjectionStore, to_offset: int | None = None) -> CellState:
    """Folds the cell's committed log from offset 0 (to `to_offset` inclusive) and saves it."""
    state = CellState(cell=cell)
    with LogReader([cell], bootstrap) as reader:
        for record in reader.read(to_offset):
            if record.event is not None:
                evolve(state, record.event, record.offset)
            else:
                state.offset = record.offset
            if len(state.dirty) > 5000:
                store.save(state)
    store.save(state, everything=True)
    return state


def differences(a: CellState, b: CellState) -> list[str]:
    """Rows that differ between two projections, by key. A service's store is its log folded in order (its
    side input, recovery's heartbeats, is kept beside the state), so it equals a rebuild to the same offset."""
    left, right = dump(a), dump(b)
    return sorted(k for k in set(left) | set(right) if left.get(k) != right.get(k))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    build = sub.add_parser("rebuild", help="fold a cell's log from offset 0 into a fresh RocksDB projection")
    build.add_argument("--cell", default=None, help="default: the first of $GANGWAY_CELLS")
    build.add_argument("--db", type=Path, required=True, help="directory of the projection to write (must be new)")
    build.add_argument("--to-offset", type=count, default=None, help="stop after this offset (state as of then)")
    build.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"))
    compare = sub.add_parser("compare", help="compare two projections row by row; exit 1 when they differ")
    compare.add_argument("left", type=Path)
    compare.add_argument("right", type=Path)


def run(args: argparse.Namespace) -> int:
    if args.action == "rebuild":
        if args.db.exists() and any(args.db.iterdir()):
            print(f"gangway: {args.db} is not empty; rebuild writes a fresh projection", file=sys.stderr)
            return 2
        store = ProjectionStore(args.db)
        state = rebuild(args.bootstrap_servers, args.cell or cells_from_env()[0], store, args.to_offset)
        store.close()
        print(f"rebuilt {state.cell} to offset {state.offset}: {len(state.jobs):,} jobs, "
              f"{len(state.cluster.nodes):,} nodes -> {args.db}")
        return 0
    states = []
    for path in (args.left, args.right):
        store = ProjectionStore(path)
        try:
            state = store.load()
        except OutdatedSnapshot as why:
            print(f"gangway: the projection in {path} was saved by an older Gangway ({why}): rebuild it",
                  file=sys.stderr)
            return 2
        finally:
            store.close()
        if state is None:
            print(f"gangway: no projection in {path}", file=sys.stderr)
            return 2
        states.append(state)
    diff = differences(*states)
    for key in diff:
        print(f"differs: {key}")
    print(f"{'identical' if not diff else f'{len(diff)} rows differ'} "
          f"(offsets {states[0].offset} and {states[1].offset})")
    return 1 if diff else 0
