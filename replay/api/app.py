"""The query API over the read model: cells, nodes, jobs (filtered, sorted, paged with a cursor), one job with
its timeline, queue position and estimated start, teams' quotas, the cohort tree, queues, hourly series, the
decision stream, health and metrics, and the dashboard's files. Every answer is JSON (4xx: `Error`), never a 500
for bad input. A team's token sees its own jobs in full and other teams' only as counts."""

import asyncio
import base64
import binascii
import json
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles
from starlette.convertors import Convertor, register_url_convertor
from starlette.exceptions import HTTPException as StarletteHTTPException

from projections.jobs import JobState
from projections.readmodel.projector import Projector
from replay.api import models as api
from replay.api.auth import Tokens, Viewer
from replay.api.metrics import CONTENT_TYPE, exposition
from replay.api.stream import RESET, StreamHub
from services.core.forecast import Estimate, forecast
from services.policy import DEFAULT_POLICY, Policy


class JobIdConvertor(Convertor[str]):
    """A job id in a path: the rest of it, '/' included (an id another writer put on the log may hold one, sent as
    %2F), but not empty nor ending in '/', so such a path is redirected without its trailing '/' like any other."""

    regex = r".*[^/]"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("job_id", JobIdConvertor())

STATIC = Path(__file__).with_name("static")
MAX_PAGE = 1000
_CURSOR = {"submitted": re.compile(r"^\d{16}\.\d{12}\x00.+$", re.S),
           "priority": re.compile(r"^\d{14}\.\d{16}\.\d{12}\x00.+$", re.S)}
_ERRORS = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found", 405: "method_not_allowed",
           500: "internal_error"}
_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": api.Error, "description": name.replace("_", " ")} for code, name in _ERRORS.items() if code < 405}


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": _ERRORS.get(status, "error"), "message": message}, status, headers=headers)


class ForecastCache:
    """The estimates of a cell's waiting jobs, computed at most once per folded offset."""

    def __init__(self, projector: Projector, policy: Policy) -> None:
        self.projector, self.policy = projector, policy
        self._cached: dict[str, tuple[int, dict[str, Estimate]]] = {}

    def of(self, cell: str) -> dict[str, Estimate]:
        with self.projector.state(cell) as state:
            cached = self._cached.get(cell)
            if cached is None or cached[0] != state.offset:
                cached = self._cached[cell] = (state.offset, forecast(state, self.policy))
            return cached[1]


def estimate_body(estimate: Estimate) -> dict[str, Any]:
    return {"team_position": estimate.team_position, "team_waiting": estimate.team_waiting,
            "cell_position": estimate.cell_position, "cell_waiting": estimate.cell_waiting,
            "estimated_start": estimate.start, "earliest_start": estimate.earliest,
            "latest_start": estimate.latest, "basis": estimate.basis.value, "detail": estimate.detail,
            "waits_for": list(estimate.waits_for)}


def create_app(projector: Projector, tokens: Tokens, policy: Policy = DEFAULT_POLICY,
               hub: StreamHub | None = None) -> FastAPI:
    """The API over `projector`'s read model; `hub` carries the projector's batches to the stream."""
    store, cells = projector.store, projector.cells
    hub = hub or StreamHub()
    forecasts = ForecastCache(projector, policy)
    bearer = HTTPBearer(auto_error=False, description="a team's or the operator's read token")

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        hub.attach(asyncio.get_running_loop())
        yield

    app = FastAPI(title="Gangway read-model API", version="1", lifespan=lifespan, responses=_ERROR_RESPONSES,
                  description="Cells, nodes, jobs, queues and quotas of a Gangway fleet as its log folds them; "
                              "a stream of decisions; health and metrics. Send `Authorization: Bearer <token>`.")

    @app.exception_handler(ApiError)
    async def api_error(_: Request, error: ApiError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if error.status == 401 else None
        return _error(error.status, error.message, headers)

    @app.exception_handler(RequestValidationError)
    async def bad_request(_: Request, error: RequestValidationError) -> JSONResponse:
        problems = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', '')}"
                             for e in error.errors())
        return _error(400, problems or "invalid request")

    @app.exception_handler(Exception)
    async def server_error(_: Request, error: Exception) -> JSONResponse:
        return _error(500, f"internal error: {type(error).__name__}")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, error: StarletteHTTPException) -> JSONResponse:
        return _error(error.status_code, str(error.detail))

    def authenticate(token: str | None) -> Viewer:
        if not token:
            raise ApiError(401, "send a read token: Authorization: Bearer <token>")
        viewer = tokens.viewer(token)
        if viewer is None:
            raise ApiError(401, "unknown token")
        return viewer

    def viewer(credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> Viewer:
        return authenticate(credentials.credentials if credentials else None)

    def known(cell: str) -> str:
        if cell not in cells:
            raise ApiError(404, f"no cell {cell!r}; cells: {', '.join(cells)}")
        return cell

    Who = Annotated[Viewer, Depends(viewer)]
    Cell = Annotated[str, Depends(known)]

    def summary(cell: str) -> dict[str, Any]:
        body = dict(store.summary(cell) or {})
        lag = projector.lag[cell]
        body["lag"] = {"offset": lag.offset, "behind": lag.behind, "seconds": round(lag.seconds(time.monotonic()), 3)}
        return body

    @app.get("/api/v1/cells", response_model=list[api.CellSummary], tags=["cells"])
    def list_cells(who: Who) -> list[dict[str, Any]]:
        """Every cell and its summary: nodes, GPUs by state, jobs by state and team, the projector's lag."""
        return [summary(cell) for cell in cells]

    @app.get("/api/v1/cells/{cell}", response_model=api.CellSummary, tags=["cells"])
    def cell_summary(cell: Cell, who: Who) -> dict[str, Any]:
        return summary(cell)

    @app.get("/api/v1/cells/{cell}/nodes", response_model=api.NodeList, tags=["fleet"])
    def nodes(cell: Cell, who: Who,
              block: Annotated[str | None, Query(description="only nodes in this block")] = None,
              rack: Annotated[str | None, Query(description="only nodes in this rack")] = None,
              state: api.NodeStateName | None = None) -> dict[str, Any]:
        """Nodes in topology order (block, rack, node) with every GPU's state; filter by domain and node state."""
        levels = (store.summary(cell) or {}).get("levels", [])
        wanted = {level: value for level, value in (("block", block), ("rack", rack)) if value is not None}
        for level in wanted:
            if level not in levels:
                raise ApiError(400, f"cell {cell} has no topology level {level!r} (levels: {', '.join(levels) or 'none'})")
        leading = []
        for level in levels:
            if level not in wanted:
                break
            leading.append(wanted[level])
        found = [n for n in store.nodes(cell, leading)
                 if all(n["domains"].get(level) == value for level, value in wanted.items())
                 and (state is None or n["state"] == state.value)]
        if not who.operator:
            for node in found:
                for gpu in node["gpu"]:
                    if gpu["team"] != who.team:
                        gpu["job_id"] = None
        return {"levels": levels, "nodes": found}

    @app.get("/api/v1/cells/{cell}/jobs", response_model=api.JobPage, tags=["jobs"])
    def jobs(cell: Cell, who: Who,
             team: str | None = None, state: JobState | None = None, priority: int | None = None,
             sort: api.Sort = api.Sort.newest,
             limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="jobs per page")] = 100,
             cursor: Annotated[str | None, Query(description="next_cursor of the previous page",
                                                 pattern="^[A-Za-z0-9_-]+$", max_length=400)] = None,
             ) -> dict[str, Any]:
        """Jobs filtered by team, state and priority, sorted, a page at a time. A team's token lists its own
        team's jobs only (other teams' are counts in the cell summary)."""
        if team is not None and not who.sees_jobs_of(team):
            raise ApiError(403, f"a token of team {who.team} lists only {who.team}'s jobs; other teams' are counts "
                                f"in /api/v1/cells/{cell}")
        team = team if team is not None or who.operator else who.team
        filters = {name: value for name, value in (("team", team), ("state", state and state.value),
                                                   ("priority", None if priority is None else str(priority)))
                   if value is not None}
        order = sort.value.lstrip("-")
        descending = sort in (api.Sort.newest, api.Sort.lowest_priority)  # the indexes read backwards
        after = _decode_cursor(cursor, order) if cursor is not None else None
        docs, last = store.jobs(cell, filters, order, descending, limit, after)
        return {"jobs": [_summary_row(doc) for doc in docs], "next_cursor": _encode_cursor(last) if last else None}

    @app.get("/api/v1/cells/{cell}/jobs/{job_id:job_id}", response_model=api.JobDetail, tags=["jobs"])
    def job(cell: Cell, job_id: str, who: Who) -> dict[str, Any]:
        """One job: spec, state, placement, reason, queue position, estimated start and timeline."""
        doc = store.job(cell, job_id)
        if doc is None:
            raise ApiError(404, f"no job {job_id!r} in cell {cell}")
        if not who.sees_jobs_of(doc["team"]):
            raise ApiError(403, f"job {job_id} belongs to another team than {who.team}")
        estimate = forecasts.of(cell).get(job_id) if doc["state"] == JobState.QUEUED.value else None
        return dict(doc, queue=estimate_body(estimate) if estimate else None, timeline=store.timeline(cell, job_id))

    @app.get("/api/v1/cells/{cell}/teams", response_model=list[api.Team], tags=["quotas"])
    def teams(cell: Cell, who: Who) -> list[dict[str, Any]]:
        """Every team's nominal quota, use, borrowed and lent GPUs and weighted share, per GPU type."""
        return (store.tenancy(cell) or {}).get("teams", [])

    @app.get("/api/v1/cells/{cell}/cohorts", response_model=list[api.CohortNode], tags=["quotas"])
    def cohorts(cell: Cell, who: Who) -> list[dict[str, Any]]:
        """The cohort tree: cohorts under their parents, teams under their cohorts."""
        return (store.tenancy(cell) or {}).get("cohorts", [])

    @app.get("/api/v1/cells/{cell}/queues", response_model=list[api.TeamQueue], tags=["jobs"])
    def queues(cell: Cell, who: Who,
               limit: Annotated[int, Query(ge=0, le=MAX_PAGE, description="waiting jobs listed per team")] = 20,
               ) -> list[dict[str, Any]]:
        """Each team's waiting jobs: how many, by reason, and the first in team order with their estimates."""
        estimates = forecasts.of(cell)
        with projector.state(cell) as state:
            waiting = sorted(((e.team_position, state.jobs[j]) for j, e in estimates.items() if j in state.jobs),
                             key=lambda pair: (pair[1].team, pair[0]))
            teams = sorted(set(state.tenancy.teams) | {job.team for _, job in waiting})
        out = {team: {"team": team, "waiting": 0, "reasons": {}, "jobs": []} for team in teams}
        for position, job in waiting:
            queue = out[job.team]
            queue["waiting"] += 1
            queue["reasons"][job.reason.value] = queue["reasons"].get(job.reason.value, 0) + 1
            if who.sees_jobs_of(job.team) and len(queue["jobs"]) < limit:
                e = estimates[job.job_id]
                doc = store.job(cell, job.job_id) or {}
                queue["jobs"].append({"job_id": job.job_id, "reason": job.reason.value,
                                      "detail": doc.get("detail", ""), "team_position": position,
                                      "cell_position": e.cell_position, "estimated_start": e.start,
                                      "basis": e.basis.value})
        return list(out.values())

    @app.get("/api/v1/cells/{cell}/series", response_model=list[api.HourlyPoint], tags=["cells"])
    def series(cell: Cell, who: Who,
               since: Annotated[int, Query(ge=0, description="first hour, event time (ms)")] = 0) -> list[dict[str, Any]]:
        """Hour by hour (event time): jobs submitted, admitted, placed, ended, preempted; summed queue wait."""
        return store.hours(cell, since)

    @app.get("/api/v1/cells/{cell}/decisions", response_model=list[api.StreamItem], tags=["decisions"])
    def decisions(cell: Cell, who: Who, team: str | None = None, job: str | None = None,
                  limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50) -> list[dict[str, Any]]:
        """The latest decisions and requests, newest first (other teams' without job ids for a team's token)."""
        items = store.latest_decisions(cell, MAX_PAGE if team or job else limit)
        return [_redact(i, who) for i in items if _wanted(i, team, job)][:limit]

    @app.get("/api/v1/stream", tags=["decisions"], response_class=StreamingResponse,
             responses={200: {"content": {"text/event-stream": {}}, "description": "server-sent events"}})
    async def stream(request: Request, cell: str | None = None, team: str | None = None, job: str | None = None,
                     access_token: Annotated[str | None, Query(description="the token, for EventSource clients "
                                                                           "that cannot send headers")] = None,
                     last_event_id: Annotated[str | None, Header()] = None,
                     credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)] = None,
                     ) -> StreamingResponse:
        """Decisions and requests as they are folded (`event: decision` / `request`, id `<cell>:<offset>`), and
        `event: progress` after each folded batch. Filter by cell, team or job; resume with Last-Event-ID."""
        who = authenticate(credentials.credentials if credentials else access_token)
        if cell is not None:
            known(cell)
        subscription = hub.subscribe()
        backlog: list[dict[str, Any]] = []
        if last_event_id and ":" in last_event_id:
            resume_cell, _, offset = last_event_id.rpartition(":")
            if resume_cell in cells and offset.lstrip("-").isdigit():
                backlog = store.decisions(resume_cell, int(offset))

        async def events() -> AsyncIterator[str]:
            try:
                yield "retry: 1000\n\n"
                for item in backlog:
                    if _wanted(item, team, job):
                        yield _sse(_redact(item, who))
                while True:
                    try:
                        item = await asyncio.wait_for(subscription.queue.get(), 15)
                    except TimeoutError:
                        if await request.is_disconnected():
                            return
                        yield ": keep-alive\n\n"
                        continue
                    if item is RESET:
                        yield "event: reset\ndata: {}\n\n"
                        return
                    if cell is not None and item.get("cell") != cell:
                        continue
                    if item["type"] == "progress":
                        yield f"event: progress\ndata: {json.dumps(item)}\n\n"
                    elif _wanted(item, team, job):
                        yield _sse(_redact(item, who))
            finally:
                hub.unsubscribe(subscription)

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @app.get("/healthz", response_model=api.Health, tags=["operations"])
    def healthz() -> dict[str, Any]:
        """Liveness and the read model's lag per cell (no token needed)."""
        now = time.monotonic()
        lags = {cell: {"offset": lag.offset, "behind": lag.behind, "seconds": round(lag.seconds(now), 3)}
                for cell, lag in projector.lag.items()}
        return {"status": "lagging" if any(lag["seconds"] > 5 for lag in lags.values()) else "ok", "cells": lags}

    @app.get("/metrics", tags=["operations"], response_class=Response,
             responses={200: {"content": {CONTENT_TYPE: {}}, "description": "Prometheus text format"}})
    def metrics(who: Who) -> Response:
        """Jobs by state and team, queue wait histogram, admissions, preemptions by reason, GPUs by state,
        projector lag."""
        return Response(exposition(projector), media_type=CONTENT_TYPE)

    @app.get("/", include_in_schema=False)
    def dashboard() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


def _summary_row(doc: dict[str, Any]) -> dict[str, Any]:
    spec = doc["spec"]
    return {"job_id": doc["job_id"], "team": doc["team"], "state": doc["state"], "reason": doc["reason"],
            "detail": doc["detail"], "priority": spec["priority"], "gpus": spec["gpus"], "gpu_type": spec["gpu_type"],
            "submitted_at": doc["submitted_at"], "updated_at": doc["updated_at"], "attempt": doc["attempt"],
            "nodes": doc["placement"]["nodes"]}


def _encode_cursor(position: str) -> str:
    return base64.urlsafe_b64encode(position.encode()).decode().rstrip("=")


def _decode_cursor(cursor: str, sort: str) -> str:
    try:
        position = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise ApiError(400, "bad cursor: pass next_cursor of a previous page unchanged") from None
    if not _CURSOR[sort].match(position):
        raise ApiError(400, f"bad cursor: not a position in {sort} order (was the sort changed?)")
    return position


def _wanted(item: dict[str, Any], team: str | None, job: str | None) -> bool:
    return (team is None or item.get("team") == team) and (job is None or item.get("job_id") == job)


def _redact(item: dict[str, Any], who: Viewer) -> dict[str, Any]:
    """Another team's item shows what happened and to which team, not to which job."""
    if item.get("job_id") is None or who.sees_jobs_of(item.get("team")):
        return item
    return dict(item, job_id=None, detail="")


def _sse(item: dict[str, Any]) -> str:
    return f"id: {item['cell']}:{item['offset']}\nevent: {item['kind']}\ndata: {json.dumps(item)}\n\n"
