"""Recovery knobs: failure detection and restart back-off."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RecoveryPolicy:
    heartbeat_timeout_ms: int = 30_000
    backoff_base_ms: int = 30_000  # first restart waits this long, doubling each time
    backoff_max_ms: int = 30 * 60_000
    use_hot_spares: bool = True
