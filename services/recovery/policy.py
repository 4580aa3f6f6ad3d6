"""Recovery knobs: failure detection and restart back-off."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RecoveryPolicy:
    heartbeat_timeout_ms: int = 30_000
    backoff_base_ms: int = 30_000  # first restart waits this long, doubling each time
    backoff_max_ms: int = 30 * 60_000
    use_hot_spares: bool = True
    #: a gang interrupted by a node's loss keeps its surviving GPUs and the spare that replaces the node through
    #: its back-off and this long after it (CapacityHeld); off: they go back to every gang at once
    hold_through_backoff: bool = True
    hold_grace_ms: int = 60_000
