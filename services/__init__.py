"""The control plane: the four deciders (admitter, placer, preemptor, recovery) with their policies, the core
they share (replica, placement, queue order, quota fit), the policy registry, the Kafka shell that runs a
replica per cell, and the node agents (the simulated fleet)."""

from events.compiled import install

install()  # the compiled build of the fold and the deciders, when it matches their sources
