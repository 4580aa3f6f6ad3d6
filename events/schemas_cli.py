"""`gangway schemas`: list the event catalogue, check schemas/ against the models, write and release schemas."""

from __future__ import annotations

import argparse
import json
import shutil

from events.avro_schema import record_schema
from events.models import EVENT_TYPES
from events.schema_catalogue import SCHEMAS_DIR, SchemaCatalogue


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action",
        choices=("list", "check", "write", "release"),
        help="list: name, version, fingerprint of each record; check: schemas/ matches the models; "
        "write: regenerate schemas/<Name>.avsc from events/models.py; "
        "release: copy each changed current schema to schemas/history/<Name>/v<N+1>.avsc",
    )


def rendered(model: type) -> str:
    return json.dumps(record_schema(model), indent=2) + "\n"


def stale_schemas() -> list[str]:
    """Names whose checked-in schema differs from what the model renders."""
    stale = []
    for model in EVENT_TYPES:
        path = SCHEMAS_DIR / f"{model.__name__}.avsc"
        if not path.exists() or path.read_text() != rendered(model):
            stale.append(model.__name__)
    return stale


def unreleased_schemas(catalogue: SchemaCatalogue) -> list[str]:
    """Names whose current schema is not yet the newest released version."""
    return [
        name
        for name, version in sorted(catalogue.current.items())
        if not catalogue.history.get(name) or catalogue.history[name][-1].fingerprint != version.fingerprint
    ]


def run(args: argparse.Namespace) -> int:
    if args.action == "write":
        for model in EVENT_TYPES:
            (SCHEMAS_DIR / f"{model.__name__}.avsc").write_text(rendered(model))
        print(f"wrote {len(EVENT_TYPES)} schemas to {SCHEMAS_DIR}")
        return 0
    catalogue = SchemaCatalogue.load()
    if args.action == "list":
        for name, version in sorted(catalogue.current.items()):
            print(f"{name:24} v{version.version:<3} {version.fingerprint:016x}")
        return 0
    if args.action == "release":
        for name in unreleased_schemas(catalogue):
            number = len(catalogue.history.get(name, ())) + 1
            target = SCHEMAS_DIR / "history" / name / f"v{number}.avsc"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(SCHEMAS_DIR / f"{name}.avsc", target)
            print(f"released {name} v{number}")
        return 0
    problems = [f"{name}: schemas/{name}.avsc differs from events/models.py (run `gangway schemas write`)"
                for name in stale_schemas()]
    problems += [f"{name}: current schema not released (run `gangway schemas release`)"
                 for name in unreleased_schemas(catalogue)]
    for problem in problems:
        print(problem)
    return 1 if problems else 0
