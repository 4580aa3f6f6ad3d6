"""A started service sets aside what exists (events/collector.py `long_lived_from_here`): full collections then
scan only what came after, and what was set aside is still freed when its last reference goes."""

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=True)
    return done.stdout.strip()


def test_a_full_collection_after_start_scans_only_what_came_after():
    out = run("""
        import gc
        import services.run_cli  # a service's modules, as `gangway run` has them when it starts
        from events.collector import long_lived_from_here
        before = len(gc.get_objects())
        long_lived_from_here()
        after = len(gc.get_objects())
        print(before, gc.get_freeze_count(), after)
    """)
    before, frozen, after = map(int, out.split())
    assert before > 20_000  # modules, classes, schemas: what every full collection scanned
    assert frozen >= before * 0.9
    assert after < 1_000  # what the next full collection scans


def test_what_was_set_aside_is_still_freed_when_let_go():
    out = run("""
        import weakref
        from events.collector import long_lived_from_here
        class Held: pass
        held = [Held() for _ in range(1000)]
        watch = weakref.ref(held[-1])
        long_lived_from_here()
        del held
        print(watch() is None)
    """)
    assert out == "True"
