"""Placement knobs: topology awareness and how tightly to pack."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PlacementPolicy:
    topology_aware: bool = True  # choose the tightest topology domain that fits (else any nodes)
    best_fit: bool = True  # fill the fullest nodes first to keep whole nodes free
    #: of equally tight nodes, take the one in the fullest rack (then block), so free nodes stay together
    pack_domains: bool = False
