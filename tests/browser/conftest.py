"""A real cell on the real broker, served by a real `gangway api` process, for browser and stream tests: topics of
their own, the admitter and placer as processes, and Debian's Chromium driven by Playwright."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from events import models as m
from events.submission import job_submitted
from events.topics import TopicNames, ensure_topics, topic_names
from tests.integration.control_plane import ROOT, ControlPlane, Operator

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
OPERATOR_TOKEN = "browser-operator-token"
TEAM_TOKENS = {"nlp": "browser-nlp-token", "cv": "browser-cv-token"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class LiveCell:
    """cell-a with 4 nodes in 2 racks and teams nlp and cv, the admitter and placer running, the API at `url`."""

    url: str
    operator: Operator
    topics: TopicNames

    def submit(self, job_id: str, team: str = "nlp", workers: int = 1, gpus: int = 8) -> None:
        envelope = self.operator.envelope(producer="launcher")
        self.operator.write(job_submitted(job_id, team, workers, gpus, "H100", cell="cell-a", at=envelope.at,
                                          producer="launcher", event_id=envelope.event_id,
                                          time_limit_ms=3_600_000))

    def get(self, path: str, token: str = OPERATOR_TOKEN, **params) -> httpx.Response:
        return httpx.get(self.url + path, params=params, headers={"Authorization": f"Bearer {token}"}, timeout=10)


@pytest.fixture(scope="module")
def live(kafka_bootstrap: str, kafka_admin, tmp_path_factory) -> Iterator[LiveCell]:
    prefix = f"t.browser.{uuid.uuid4().hex[:8]}."
    state = tmp_path_factory.mktemp("live")
    ensure_topics(kafka_admin, ["cell-a"], 1, prefix=prefix)
    topics = topic_names(prefix)
    tokens = state / "tokens.yaml"
    tokens.write_text(f"operator: {OPERATOR_TOKEN}\nteams:\n" + "".join(f"  {t}: {k}\n" for t, k in TEAM_TOKENS.items()))
    port = free_port()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("GANGWAY_TOPIC_PREFIX", prefix)
        env.setenv("GANGWAY_CELLS", "cell-a")
        plane = ControlPlane(kafka_bootstrap, state)
        plane.start("admitter")
        plane.start("placer")
        api = subprocess.Popen([sys.executable, "-m", "replay.cli", "api", "--port", str(port), "--tokens", str(tokens),
                                "--db", str(state / "readmodel"), "--bootstrap-servers", kafka_bootstrap,
                                "--cells", "cell-a"], cwd=ROOT, env=dict(os.environ),
                               stdout=open(state / "api.log", "wb"), stderr=subprocess.STDOUT)  # noqa: SIM115
        operator = Operator(kafka_bootstrap, topics)
        operator.cell(nodes=4, racks=2, quota=16)
        operator.write(m.TeamDefined(envelope=operator.envelope(), team="cv"),
                       m.QuotaSet(envelope=operator.envelope(), team="cv", gpu_type="H100", nominal=16))
        cell = LiveCell(f"http://127.0.0.1:{port}", operator, topics)
        try:
            _wait_for(lambda: cell.get("/api/v1/cells/cell-a").json().get("nodes") == 4, 60, state / "api.log")
            yield cell
        finally:
            api.terminate()
            api.wait(30)
            plane.stop_all()
            kafka_admin.delete_topics([topics.events, topics.heartbeats, topics.deadletter])


def _wait_for(ready, timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if ready():
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"gangway api not ready in {timeout} s:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():  # compose/test.sh installs it; say so when run another way
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (compose/test.sh does it)", pytrace=False)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


