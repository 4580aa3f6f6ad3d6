"""Preemption knobs: when eviction is allowed and how long a victim has to checkpoint."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PreemptionPolicy:
    enabled: bool = True
    reclaim_lent_quota: bool = True  # evict borrowers so a lender gets its nominal back
    priority: bool = True  # evict lower-priority preemptible jobs
    checkpoint_aware: bool = True  # prefer victims that lose the least work since their last checkpoint
    checkpoint_grace_ms: int = 5 * 60_000
    min_runtime_ms: int = 10 * 60_000  # a job just (re)started is protected this long
    wait_before_preempting_ms: int = 0  # how long a gang must have waited before it may preempt
