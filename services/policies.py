"""The policy catalogue: Gangway's own policy and the baselines its users would otherwise pick.

Each entry is a plain, versioned `Policy` value built from the deciders' existing knobs, so the
simulator (or a what-if replay) runs the very same deciders under another policy:

| name | what it models | knobs that differ from `gangway` |
| --- | --- | --- |
| `gangway` | quota lending and borrowing in a cohort, fair share, within-nominal work first, backfill around up to 4 aged reservations, topology-aware best-fit placement, checkpoint-aware reclaim preemption | none |
| `fifo` | one strict FIFO queue of gangs: the head blocks everything behind it | no fair share, no within-nominal ordering, no backfill, no preemption |
| `static` | a static partition: each team confined to its nominal quota, nothing lent | no borrowing, no preemption |
| `kueue-like` | Kueue with BestEffortFIFO queues: lending, borrowing, reclaim and priority preemption, no topology or checkpoint awareness, one admission per queue per cycle | no fair share, no reservations, topology-blind first-fit placement, victims newest first with no checkpoint grace, no minimum runtime, 1 admission per team per cycle |
| `backfill` | Slurm-like FIFO with EASY backfill: the first blocked gang reserves nodes at once, later work backfills around it | no fair share, no within-nominal ordering, 1 reservation taken at once, no preemption |
"""

from __future__ import annotations

from dataclasses import replace

from services.admitter.policy import AdmissionPolicy
from services.placer.policy import PlacementPolicy
from services.policy import DEFAULT_POLICY, Policy
from services.preemptor.policy import PreemptionPolicy

GANGWAY = DEFAULT_POLICY

FIFO = Policy(
    version="fifo-1",
    admission=AdmissionPolicy(fair_share=False, nominal_first=False, backfill=False, max_reservations=0),
    preemption=PreemptionPolicy(enabled=False),
)

STATIC = Policy(
    version="static-1",
    admission=replace(AdmissionPolicy(), borrowing=False),
    preemption=PreemptionPolicy(enabled=False),
)

KUEUE_LIKE = Policy(
    version="kueue-like-1",
    admission=AdmissionPolicy(fair_share=False, nominal_first=True, backfill=True, max_reservations=0,
                              admissions_per_team_per_cycle=1),
    placement=PlacementPolicy(topology_aware=False, best_fit=False),
    preemption=PreemptionPolicy(enabled=True, reclaim_lent_quota=True, priority=True, checkpoint_aware=False,
                                checkpoint_grace_ms=0, min_runtime_ms=0),
)

BACKFILL = Policy(
    version="backfill-1",
    admission=AdmissionPolicy(fair_share=False, nominal_first=False, backfill=True, reservation_after_ms=0,
                              max_reservations=1),
    preemption=PreemptionPolicy(enabled=False),
)

#: name -> policy, in the order comparisons list them.
CATALOGUE: dict[str, Policy] = {
    "gangway": GANGWAY,
    "fifo": FIFO,
    "static": STATIC,
    "kueue-like": KUEUE_LIKE,
    "backfill": BACKFILL,
}


def policy(name: str) -> Policy:
    """The catalogue's policy of that name; KeyError names the known ones."""
    try:
        return CATALOGUE[name]
    except KeyError:
        raise KeyError(f"unknown policy {name!r}; known: {', '.join(CATALOGUE)}") from None
