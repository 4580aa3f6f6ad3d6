"""The topic catalogue as data: names, prefixes, cell-to-partition mapping and configs."""

from __future__ import annotations

import pytest

from events.topics import (
    DEADLETTER,
    EVENTS,
    HEARTBEATS,
    TopicError,
    catalogue,
    cell_partition,
    cells_from_env,
    topic_names,
    validate_cells,
)


def test_default_cells_and_order_from_env() -> None:
    assert cells_from_env({}) == ("cell-a",)
    assert cells_from_env({"GANGWAY_CELLS": "east, west,north"}) == ("east", "west", "north")


@pytest.mark.parametrize("cells", [["a", "a"], ["a b"], []])
def test_bad_cell_lists_are_refused(cells: list[str]) -> None:
    with pytest.raises(TopicError):
        validate_cells(cells)


def test_cell_i_is_partition_i() -> None:
    cells = ("cell-a", "cell-b", "cell-c")
    assert [cell_partition(cells, c) for c in cells] == [0, 1, 2]
    with pytest.raises(TopicError, match="unknown cell"):
        cell_partition(cells, "cell-z")


def test_catalogue_one_node() -> None:
    events, heartbeats, deadletter = catalogue(["cell-a", "cell-b"], 1, prefix="")
    assert (events.name, heartbeats.name, deadletter.name) == (EVENTS, HEARTBEATS, DEADLETTER)
    assert (events.partitions, heartbeats.partitions, deadletter.partitions) == (2, 2, 1)
    assert events.config["retention.ms"] == "-1"
    assert events.config["cleanup.policy"] == "delete"
    assert events.config["min.insync.replicas"] == "1"
    assert heartbeats.config["retention.ms"] == str(3600 * 1000)
    assert deadletter.config["retention.ms"] == str(30 * 24 * 3600 * 1000)
    assert {s.replication_factor for s in (events, heartbeats, deadletter)} == {1}


def test_catalogue_three_nodes_needs_two_in_sync_replicas() -> None:
    events, _, deadletter = catalogue(["cell-a"], 3, prefix="")
    assert events.replication_factor == 3
    assert events.config["min.insync.replicas"] == "2"
    assert deadletter.config["min.insync.replicas"] == "2"


def test_prefix_from_env_isolates_every_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GANGWAY_TOPIC_PREFIX", "t.abc.")
    names = topic_names()
    assert (names.events, names.heartbeats, names.deadletter) == (
        "t.abc.gangway.events", "t.abc.gangway.heartbeats", "t.abc.gangway.deadletter")
    assert all(s.name.startswith("t.abc.") for s in catalogue(["cell-a"], 1))
