"""A started service sets aside what exists (events/collector.py `long_lived_from_here`), and a running one what
each batch left (`BetweenBatches`): full collections then scan only what came after, what was set aside is still
freed when its last reference goes, and a cycle set aside is freed by the sweep at a quiet poll."""

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


def test_what_a_batch_left_is_set_aside_and_collections_scan_only_the_next_batch():
    out = run("""
        import gc
        from events.collector import BetweenBatches, YOUNG_THRESHOLD
        default = gc.get_threshold()
        collector = BetweenBatches(sweep_every_s=3600)
        state = {i: [i] for i in range(50_000)}  # what a batch folded into the state it keeps
        collector.after_poll(500)
        frozen, scanned = gc.get_freeze_count(), len(gc.get_objects())
        collector.after_poll(0)  # quiet, and no sweep due: nothing set aside comes back
        again = len(gc.get_objects())
        young = gc.get_threshold()[0]
        gc.collect()
        collector.close()
        print(frozen, scanned, again, young == YOUNG_THRESHOLD, collector.seconds > 0,
              gc.get_threshold() == default)
    """)
    frozen, scanned, again, paced, timed, restored = out.split()
    assert int(frozen) > 50_000 and int(scanned) < 1_000 and int(again) < 1_000
    assert (paced, timed, restored) == ("True", "True", "True")


def test_a_cycle_set_aside_is_freed_by_the_sweep_at_a_quiet_poll_or_once_twice_overdue():
    out = run("""
        import gc, time, weakref
        from events.collector import BetweenBatches
        class Node: pass
        def cycle():
            a, b = Node(), Node()
            a.other, b.other = b, a
            return weakref.ref(a)
        collector = BetweenBatches(sweep_every_s=100)
        watch = cycle()  # dead at once, but alive to no collection before the batch ends: set aside with it
        collector.after_poll(3)
        gc.collect()
        kept = watch() is not None
        collector.after_poll(0)  # quiet, but no sweep due
        collector.swept_at = time.monotonic() - 150  # due, not twice over
        collector.after_poll(5)  # busy: the sweep waits for a quiet poll
        waited = watch() is not None
        collector.after_poll(0)  # quiet and due
        swept_quiet = watch() is None
        watch = cycle()
        collector.after_poll(5)
        collector.swept_at = time.monotonic() - 250  # twice overdue: busy polls never let one come back empty
        collector.after_poll(9)
        print(kept, waited, swept_quiet, watch() is None, collector.sweeps)
    """)
    assert out == "True True True True 2"


def test_overlapping_collectors_restore_pythons_pace_and_let_go_when_the_last_closes():
    out = run("""
        import gc
        from events.collector import BetweenBatches
        default = gc.get_threshold()
        first, second = BetweenBatches(), BetweenBatches()
        state = [[i] for i in range(10_000)]
        first.after_poll(1)
        first.close()
        paced_still, frozen_still = gc.get_threshold() != default, gc.get_freeze_count() > 10_000
        second.close()
        print(paced_still, frozen_still, gc.get_threshold() == default, gc.get_freeze_count())
    """)
    assert out == "True True True 0"


def test_an_unpaced_collector_is_only_timed():
    out = run("""
        import gc
        from events.collector import BetweenBatches
        default = gc.get_threshold()
        collector = BetweenBatches(sweep_every_s=0, paced=False)
        state = [[i] for i in range(50_000)]
        collector.after_poll(500)
        collector.after_poll(0)
        gc.collect()
        print(gc.get_freeze_count(), gc.get_threshold() == default, collector.sweeps, collector.seconds > 0)
    """)
    assert out == "0 True 0 True"
