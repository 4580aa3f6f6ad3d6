"""The `gangway` dispatcher: every subcommand in its table loads and parses, and a command loads only what it
needs (an audit of a file starts without Kafka, the web stack or the launcher's client)."""

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from replay.cli import SUBCOMMANDS, build_parser, command_of

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name, where", [(name, where) for name, _, where in SUBCOMMANDS])
def test_every_subcommand_loads_and_builds_its_arguments(name, where):
    command = command_of(where)
    subcommands = next(a for a in build_parser(name)._actions if isinstance(a, argparse._SubParsersAction))
    built = subcommands.choices[name]
    assert built.get_default("run") is command.run and built.format_help().startswith(f"usage: gangway {name}")


def test_the_help_lists_every_subcommand_without_loading_any():
    code = ("import sys; from replay.cli import build_parser; text = build_parser('').format_help(); "
            "print(sum(f' {name} ' in text or f' {name}\\n' in text for name in "
            "[n for n, _, _ in __import__('replay.cli').cli.SUBCOMMANDS])); "
            "print(sorted(m for m in sys.modules if m.startswith(('services', 'projections', 'replay.audit'))))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    listed, loaded = out.splitlines()
    assert int(listed) == len(SUBCOMMANDS) and loaded == "[]"


def test_an_audit_of_a_file_loads_no_kafka_web_stack_or_launcher_client():
    golden = ROOT / "tests" / "golden" / "demo.avro"
    code = ("import sys; from replay.cli import main; main(['replay', 'state', '--at', '40', '--log', "
            f"{str(golden)!r}]); print(sorted(m for m in ('confluent_kafka', 'fastapi', 'rich', "
            "'services.launcher.client') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[-1] == "[]"


def test_the_demo_takes_its_defaults_and_numbers_within_bounds():
    args = build_parser("demo").parse_args(["demo", "--speedup", "30", "--nodes", "1", "--node-failure-at", "0"])
    assert (args.speedup, args.nodes, args.node_failure_at, args.duration) == (30.0, 1, 0.0, 120.0)
