"""Quiet Ticks: a decider whose Tick decided nothing remembers, on the state, until when a Tick on that same state
(`CellState.changes`) under the same policy would decide nothing again; a Tick before then is skipped. Each decider
says when (`first_after` the times it compared `now` with). The cache changes no decision, only its cost."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence

from projections.cell import CellState
from projections.validate import LATEST_MS
from services.core.decider import Context

#: Off only to show, in tests, that skipping quiet Ticks changes no decision.
SKIP_QUIET_TICKS = True
#: Later than any time a cell holds: quiet until something changes.
NEVER = LATEST_MS + 2


def is_quiet(state: CellState, decider: str, ctx: Context, count: int | None = None) -> bool:
    """Whether `decider`'s last Tick on this very state and policy decided nothing, and its quiet lasts past now.
    `count`: what tells the state changed for this decider, when coarser than `CellState.changes`."""
    quiet = state.memo.get(decider)
    return (SKIP_QUIET_TICKS and quiet is not None and quiet[0] == (state.changes if count is None else count)
            and ctx.now < quiet[2] and (quiet[1] is ctx.policy or quiet[1] == ctx.policy)
            and state.restated >= quiet[3])


def remember(state: CellState, decider: str, ctx: Context, until: int | None, count: int | None = None,
             restating: int = 0) -> None:
    """`decider`'s Tick decided nothing and would decide nothing before `until` on this state; None: it decided.
    With `restating`, it decided that many restatements of why gangs wait (which `count` does not count): quiet
    only once at least that many more are folded, so never on this state as it is."""
    if until is None:
        state.memo.pop(decider, None)
    else:
        state.memo[decider] = (state.changes if count is None else count, ctx.policy, until, state.restated + restating)


def first_after(moments: Iterable[int], now: int) -> int:
    """The first time after `now` at which a comparison of `now` with one of `moments` (before, at or past it) may
    come out otherwise: the moment itself, or one past it for a moment of now."""
    return min([moment if moment > now else now + 1 for moment in moments if moment >= now], default=NEVER)


def first_waiting(state: CellState, wait_ms: int | None, now: int) -> int:
    """`first_after` the times not yet past at which a waiting gang comes back from backing off, or has waited
    `wait_ms` (from its submission or its return, whichever is later; None: only the returns), found by bisecting
    the state's sorted indexes of them; a time past NEVER counts as NEVER (both lie beyond every time a cell holds,
    so a quiet Tick compares them alike)."""
    first = _first_from(state.queued_returns, now, 0)
    return first if wait_ms is None else min(first, _first_from(state.queued_since, now, wait_ms))


def _first_from(moments: Sequence[int], now: int, later_by: int) -> int:
    """`first_after` the sorted `moments`, each `later_by` later, capped at NEVER."""
    i = bisect_left(moments, now - later_by)
    if i == len(moments):
        return NEVER
    at = moments[i] + later_by
    return now + 1 if at == now else min(at, NEVER)


def compared_until(state: CellState, compared: Sequence[int], now: int) -> int:
    """The first time after `now` at which a comparison of `now` with one of the `compared` times, or of `now` plus
    a waiting gang's time limit with one of them, may come out otherwise: the time itself or one past it, and for
    a limit L, the time less L plus one (where `now + L` passes it; L is at least 1)."""
    until = first_after(compared, now)
    if not compared:
        return until
    ordered = state.queued_limit_values
    for moment in compared:
        i = bisect_right(ordered, moment - now)  # the longest limit for which moment - limit + 1 is after now
        if i:
            until = min(until, moment - ordered[i - 1] + 1)
    return until
