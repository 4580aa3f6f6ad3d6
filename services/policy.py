"""Policies are plain, versioned values: replaying a log with another policy is a what-if."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from services.admitter.policy import AdmissionPolicy
from services.placer.policy import PlacementPolicy
from services.preemptor.policy import PreemptionPolicy
from services.recovery.policy import RecoveryPolicy


@dataclass(frozen=True)
class Policy:
    """Every knob of every decider, under one version string that decisions record."""

    version: str = "gangway-2"  # a change of any default is a new version (services/policies.py keeps the old)
    admission: AdmissionPolicy = field(default_factory=AdmissionPolicy)
    placement: PlacementPolicy = field(default_factory=PlacementPolicy)
    preemption: PreemptionPolicy = field(default_factory=PreemptionPolicy)
    recovery: RecoveryPolicy = field(default_factory=RecoveryPolicy)

    def with_version(self, version: str) -> Policy:
        return replace(self, version=version)


#: gangway-8: gangway-4 (gangway-2 with time limits enforced, workers given 5 minutes to start, gangs kept in one
#: rack: nodes packed rack by rack, preemption making room in one rack when it can at no higher cost) that
#: consolidates: a gang whose free GPUs are scattered over nodes gets whole nodes by moving smaller jobs, the room
#: those moves count on is kept for them until they have left (gangway-5 did not keep it), and the moved jobs are
#: admitted again in the order the move's plan placed them (gangway-6 admitted them in queue order); a quiet cycle
#: asks each gang it looks at whether it may reserve, whatever gangs of its size it looked at first (gangway-7 did not).
#: gangway-9: a reservation holding a node out of service is planned again on nodes in service, a gang its quota
#: holds back reserves no nodes while its GPUs are free in number, and a gang bigger than half its GPU type reserves
#: nodes once it has waited 7 days (gangway-8 waited for the node to come back, kept other teams' work, within their
#: nominal quota included, off idle nodes for such a gang, and let a stream of smaller work starve a big gang).
#: gangway-10: within a team, gangs go by deadline (submission plus time limit), earliest first (gangway-9: by
#: submission).
#: gangway-11: a hold on a node out of service is released at once; when the victim search in candidate order finds
#: no set, each victim that alone makes room is still tried; a victim interrupted by a node's loss holds nothing
#: through its back-off; a reservation whose nodes lost GPUs and no longer hold its gang is planned again or given
#: up; and a gang of a higher priority may use another team's reservation (gangway-10: a hold on a failed node was
#: kept until it ran out; a first pick that freed nothing useful hid a single victim that would do, so a lender
#: waited for its borrowers' jobs to end; an interrupted victim took back GPUs held for its preemptor; a reservation
#: drained nodes its gang could no longer use; only the holder's own team could pass its reservation).
DEFAULT_POLICY = Policy(version="gangway-11", recovery=RecoveryPolicy(enforce_time_limits=True,
                                                                      start_timeout_ms=5 * 60_000,
                                                                      hold_victims_through_backoff=False),
                        admission=AdmissionPolicy(movers_in_plan_order=True, quiet_cycles_reserve=True,
                                                  replan_reservations=True, quota_held_reserves_free_nodes=False,
                                                  big_gangs_reserve_after_ms=7 * 24 * 3_600_000,
                                                  earliest_deadline_first=True, release_holds_out_of_service=True,
                                                  replan_unfit_reservations=True, priority_passes_reservations=True),
                        placement=PlacementPolicy(pack_domains=True),
                        preemption=PreemptionPolicy(prefer_one_rack=True, consolidate=True, keep_room_for_moves=True,
                                                    single_victims_always=True))
