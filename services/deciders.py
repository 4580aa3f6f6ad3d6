"""The four deciders by service name, in the order they answer an event: what the services run on Kafka, what
`verify` replays and what the in-memory cell runs, without the Kafka shell's imports."""

from __future__ import annotations

from services.admitter.decide import Admitter
from services.placer.decide import Placer
from services.preemptor.decide import Preemptor
from services.recovery.decide import Recovery

DECIDERS = {"admitter": Admitter, "placer": Placer, "preemptor": Preemptor, "recovery": Recovery}
