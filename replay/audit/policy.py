"""Which policy an audit judges a cell by: the one its admitter records in its latest decision, or one named."""

from __future__ import annotations

from collections.abc import Sequence

from events import models as m
from replay.source import AuditError
from services.policies import UnknownPolicy, resolve
from services.policy import DEFAULT_POLICY, Policy


def named(name: str) -> Policy:
    """The registry's policy for a name or recorded version; AuditError naming the known ones otherwise."""
    try:
        return resolve(name)
    except UnknownPolicy as error:
        raise AuditError(str(error)) from None


def recorded(records: Sequence[tuple[int, m.Event]], producer: str = "admitter") -> Policy:
    """The policy of `producer`'s latest decision in the records (the default policy before any)."""
    for _, event in reversed(records):
        if event.is_decision and event.envelope.producer == producer and event.envelope.policy_version:
            return named(event.envelope.policy_version)
    return DEFAULT_POLICY
