"""Recovery knobs: failure detection and restart back-off."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RecoveryPolicy:
    heartbeat_timeout_ms: int = 30_000
    #: more than this share of the heartbeating nodes silent at once (two or more) is taken for a stalled heartbeat
    #: path, not dead nodes: none of them is failed for silence (100 turns this off)
    mass_silence_percent: int = 50
    backoff_base_ms: int = 30_000  # first restart waits this long, doubling each time
    backoff_max_ms: int = 30 * 60_000
    use_hot_spares: bool = True
    #: a gang interrupted by a node's loss keeps its surviving GPUs and the spare that replaces the node through
    #: its back-off and this long after it (CapacityHeld); off: they go back to every gang at once
    hold_through_backoff: bool = True
    hold_grace_ms: int = 60_000
    #: with `hold_through_backoff`, a gang that was making room for another (asked to checkpoint for a preemption or a
    #: move) keeps its GPUs through its back-off too; off (gangway-11): they are held for the gang it made room for
    #: already, and stay that gang's
    hold_victims_through_backoff: bool = True
    #: a run that exceeds its job's time limit ends the job (JobFailed, TIME_LIMIT_EXCEEDED), as Slurm ends a job
    #: at its TimeLimit: backfill's promise to a reservation rests on it. Off: limits only plan (gangway-2)
    enforce_time_limits: bool = False
    #: a gang whose workers have not all started this long after its admission is interrupted and requeued with
    #: back-off (Kueue's waitForPodsReady); None: it may wait for them for ever (gangway-2)
    start_timeout_ms: int | None = None

    def __post_init__(self) -> None:
        if self.start_timeout_ms is not None and self.start_timeout_ms <= 0:
            raise ValueError(f"policy.recovery.start_timeout_ms must be more than 0 (or null: none), not "
                             f"{self.start_timeout_ms!r}")
        if self.heartbeat_timeout_ms <= 0:
            raise ValueError(f"policy.recovery.heartbeat_timeout_ms must be more than 0, not {self.heartbeat_timeout_ms!r}")
        if not 0 <= self.mass_silence_percent <= 100:
            raise ValueError("policy.recovery.mass_silence_percent must be between 0 and 100, not "
                             f"{self.mass_silence_percent!r}")
