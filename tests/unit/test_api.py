"""The query API over a real read model (RocksDB, folded from a log the deciders wrote): answers, access by
token, and bad queries answered 4xx with a JSON error, never 500."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from replay.api.app import create_app
from tests import builders as b
from tests.api_fixtures import (
    CELL,
    CV_TOKEN,
    NLP_TOKEN,
    OPERATOR_TOKEN,
    TOKENS,
    busy_cell_log,
    every_job,
    projector_over,
)

BASE = f"/api/v1/cells/{CELL}"


@pytest.fixture(scope="module")
def projector(tmp_path_factory):
    projector = projector_over(tmp_path_factory.mktemp("readmodel"), busy_cell_log())
    yield projector
    projector.store.close()


@pytest.fixture(scope="module")
def client(projector):
    with TestClient(create_app(projector, TOKENS), raise_server_exceptions=False) as client:
        yield client


def get(client, path, token=OPERATOR_TOKEN, **params):
    return client.get(path, params=params, headers={"Authorization": f"Bearer {token}"} if token else {})


def walk(client, token=OPERATOR_TOKEN, **params) -> list[dict]:
    rows, cursor = [], None
    while True:
        page = get(client, f"{BASE}/jobs", token, **params, **({"cursor": cursor} if cursor else {})).json()
        rows += page["jobs"]
        cursor = page["next_cursor"]
        if cursor is None:
            return rows


def test_the_cell_summary_counts_what_the_state_holds(client, projector):
    body = get(client, BASE).json()
    with projector.state(CELL) as state:
        assert body["nodes"] == len(state.cluster.nodes) == 8
        assert sum(body["jobs"].values()) == len(every_job(busy_cell_log())) == len(state.jobs) + len(state.retired)
        assert body["gpus"]["busy"] == sum(len(n.holder) for n in state.cluster.nodes.values()) > 0
        assert body["offset"] == state.offset and body["lag"]["offset"] == state.offset
    assert body["levels"] == ["block", "rack"]
    assert get(client, "/api/v1/cells").json()[0]["cell"] == CELL


def test_jobs_page_by_cursor_in_each_order_and_filter(client, projector):
    jobs = sorted(every_job(busy_cell_log()), key=lambda j: (j.submitted_at, j.submit_offset))
    queued = [j.job_id for j in jobs if j.team == "nlp" and j.state.value == "queued"]
    high = [j.job_id for j in jobs if j.priority == 10]
    assert [r["job_id"] for r in walk(client, sort="submitted", limit=7)] == [j.job_id for j in jobs]
    assert [r["job_id"] for r in walk(client, limit=5)] == [j.job_id for j in reversed(jobs)]  # newest first
    assert [r["job_id"] for r in walk(client, team="nlp", state="queued", sort="submitted", limit=3)] == queued
    assert queued and [r["job_id"] for r in walk(client, priority=10, sort="submitted")] == high
    by_priority = [r["priority"] for r in walk(client, sort="priority", limit=9)]
    assert by_priority == sorted(by_priority, reverse=True)


def test_a_queued_job_shows_its_position_estimate_and_timeline(client):
    queued = walk(client, state="queued", sort="submitted")
    assert queued
    body = get(client, f"{BASE}/jobs/{queued[0]['job_id']}").json()
    assert body["state"] == "queued" and body["queue"]["cell_position"] >= 1
    assert body["queue"]["basis"] in {"time_limits", "reservation", "now", "unknown_end", "too_large"}
    assert body["timeline"][0]["type"] == "JobSubmitted"
    placed = walk(client, state="placed", sort="submitted")[0]
    body = get(client, f"{BASE}/jobs/{placed['job_id']}").json()
    assert body["queue"] is None and body["placement"]["nodes"] and body["placement"]["workers"]
    assert [e["type"] for e in body["timeline"]][:3] == ["JobSubmitted", "JobAdmitted", "JobPlaced"]


def test_teams_quotas_cohorts_and_queues(client):
    teams = {t["team"]: t for t in get(client, f"{BASE}/teams").json()}
    assert set(teams) == {"nlp", "cv"}
    nlp = teams["nlp"]["quotas"][0]
    assert nlp["nominal"] == 32 and nlp["used"] >= 0
    assert get(client, f"{BASE}/cohorts").json() == [
        {"name": "all", "kind": "cohort", "children": [{"name": "cv", "kind": "team", "children": []},
                                                       {"name": "nlp", "kind": "team", "children": []}]}]
    queues = {q["team"]: q for q in get(client, f"{BASE}/queues").json()}
    assert queues["nlp"]["waiting"] == sum(queues["nlp"]["reasons"].values()) > 0
    assert [j["team_position"] for j in queues["nlp"]["jobs"]] == list(range(1, len(queues["nlp"]["jobs"]) + 1))


def test_nodes_by_domain_and_state(client):
    every = get(client, f"{BASE}/nodes").json()["nodes"]
    assert [n["name"] for n in every] == [f"n{i}" for i in range(8)]
    assert [n["name"] for n in get(client, f"{BASE}/nodes", block="b1").json()["nodes"]] == ["n4", "n5", "n6", "n7"]
    assert [n["name"] for n in get(client, f"{BASE}/nodes", rack="r1").json()["nodes"]] == ["n2", "n3", "n6", "n7"]
    assert [n["name"] for n in get(client, f"{BASE}/nodes", state="cordoned").json()["nodes"]] == ["n7"]
    assert sum(len(n["gpu"]) for n in every) == 64 and {g["state"] for n in every for g in n["gpu"]} == {"busy"}


def test_a_team_token_sees_its_own_jobs_and_other_teams_only_as_counts(client):
    mine = walk(client, NLP_TOKEN, sort="submitted")
    assert mine and {r["team"] for r in mine} == {"nlp"}
    other = walk(client, CV_TOKEN, sort="submitted")[0]["job_id"]
    denied = get(client, f"{BASE}/jobs/{other}", NLP_TOKEN)
    assert denied.status_code == 403 and denied.json()["error"] == "forbidden"
    assert get(client, f"{BASE}/jobs", NLP_TOKEN, team="cv").status_code == 403
    assert get(client, BASE, NLP_TOKEN).json()["jobs_by_team"]["cv"]  # counts are open
    gpus = [g for n in get(client, f"{BASE}/nodes", NLP_TOKEN).json()["nodes"] for g in n["gpu"]]
    assert all(g["job_id"] is None for g in gpus if g["team"] == "cv") and any(g["team"] == "cv" for g in gpus)
    assert any(g["job_id"] for g in gpus if g["team"] == "nlp")
    queues = {q["team"]: q for q in get(client, f"{BASE}/queues", NLP_TOKEN).json()}
    assert queues["cv"]["jobs"] == [] and queues["cv"]["waiting"] > 0
    items = get(client, f"{BASE}/decisions", NLP_TOKEN, limit=200).json()
    assert all(i["job_id"] is None for i in items if i["team"] == "cv")


@pytest.mark.parametrize("path, params, token, status", [
    (f"{BASE}/jobs", {}, None, 401),
    (f"{BASE}/jobs", {}, "not-a-known-token", 401),
    (f"{BASE}/jobs/no-such-job", {}, OPERATOR_TOKEN, 404),
    ("/api/v1/cells/no-such-cell/jobs", {}, OPERATOR_TOKEN, 404),
    (f"{BASE}/jobs", {"state": "sleeping"}, OPERATOR_TOKEN, 400),
    (f"{BASE}/jobs", {"priority": "high"}, OPERATOR_TOKEN, 400),
    (f"{BASE}/jobs", {"sort": "size"}, OPERATOR_TOKEN, 400),
    (f"{BASE}/jobs", {"cursor": "%%%not-base64"}, OPERATOR_TOKEN, 400),
    (f"{BASE}/jobs", {"cursor": "aGVsbG8"}, OPERATOR_TOKEN, 400),  # base64 of a non-position
    (f"{BASE}/jobs", {"limit": 10**9}, OPERATOR_TOKEN, 400),
    (f"{BASE}/jobs", {"limit": 0}, OPERATOR_TOKEN, 400),
    (f"{BASE}/nodes", {"state": "melting"}, OPERATOR_TOKEN, 400),
    (f"{BASE}/nodes", {"zone": "z1", "rack": "r9"}, OPERATOR_TOKEN, 200),
    ("/metrics", {}, None, 401),
    ("/api/v1/stream", {"cell": "no-such-cell", "access_token": OPERATOR_TOKEN}, None, 404),
    ("/api/v1/stream", {}, None, 401),
])
def test_bad_queries_get_a_4xx_with_a_json_error(client, path, params, token, status):
    response = get(client, path, token, **params)
    assert response.status_code == status, response.text
    if status != 200:
        body = response.json()
        assert set(body) == {"error", "message"} and body["message"]


def test_a_cursor_from_another_order_is_refused(client):
    cursor = get(client, f"{BASE}/jobs", limit=2, sort="submitted").json()["next_cursor"]
    assert get(client, f"{BASE}/jobs", limit=2, sort="submitted", cursor=cursor).status_code == 200
    response = get(client, f"{BASE}/jobs", limit=2, sort="priority", cursor=cursor)
    assert response.status_code == 400 and "cursor" in response.json()["message"]


def test_health_metrics_and_openapi(client):
    health = client.get("/healthz").json()
    assert health["status"] == "ok" and CELL in health["cells"]
    text = get(client, "/metrics").text
    for name in ("gangway_jobs{", "gangway_queue_wait_seconds_bucket{", "gangway_admissions_total{",
                 "gangway_gpus{", "gangway_projector_lag_seconds{"):
        assert name in text, name
    assert 'state="busy"' in text
    paths = client.get("/openapi.json").json()["paths"]
    assert "/api/v1/cells/{cell}/jobs/{job_id}" in paths and "/healthz" in paths
    assert "<title>Gangway" in client.get("/").text


def test_a_job_whose_id_holds_a_slash_is_found_by_its_escaped_id(tmp_path):
    """The launcher refuses such ids, but another writer may have put one on the log: it is still fetched, as %2F."""
    log = b.fold(b.topology("block", "rack"), b.node("n0", block="b0", rack="r0"), b.team("nlp"), b.quota("nlp", 8),
                 b.job("runs/7", workers=1, gpus=8, team="nlp")).log
    projector = projector_over(tmp_path, log)
    try:
        with TestClient(create_app(projector, TOKENS), raise_server_exceptions=False) as client:
            body = get(client, f"{BASE}/jobs/runs%2F7").json()
            assert body["job_id"] == "runs/7" and body["state"] == "placed"
            assert get(client, f"{BASE}/jobs/runs%2F8").status_code == 404
            for path, to in ((f"{BASE}/jobs/", f"{BASE}/jobs"), (f"{BASE}/jobs/runs%2F7/", f"{BASE}/jobs/runs/7")):
                moved = client.get(path, headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"}, follow_redirects=False)
                assert moved.status_code == 307 and moved.headers["location"].endswith(to)  # without its '/'
            assert get(client, f"{BASE}/jobs/runs/7").json()["job_id"] == "runs/7"
    finally:
        projector.store.close()
