"""Fixtures the integration tests share."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from events.auth import Credentials, add_principals


@pytest.fixture
def principals(kafka_bootstrap, topic_prefix):
    """Makes principals with their ACLs on this test's topics; returns their credentials by name."""
    data_dir = os.environ.get("GANGWAY_TEST_KAFKA_DATA")
    if not data_dir:
        pytest.fail("the tenancy tests need the local broker with SASL and ACLs that the suite starts itself: unset "
                    "$KAFKA_BOOTSTRAP_SERVERS and set GANGWAY_TEST_KAFKA=local", pytrace=False)

    def make(*names: str) -> dict[str, Credentials]:
        entries = add_principals(kafka_bootstrap, names, topic_prefix=topic_prefix, name_prefix=topic_prefix,
                                 data_dir=Path(data_dir))
        return {name: Credentials(name, entry["password"]) for name, entry in entries.items()}

    return make
