// Gangway's dashboard: plain JavaScript over the read-model API (no build step). The token comes from the URL
// fragment (#token=...) or the sign-in form and stays in this tab's sessionStorage; the view reloads what it
// shows whenever the decision stream says the cell moved on.
"use strict";

const $ = (id) => document.getElementById(id);
const STATES = ["queued", "admitted", "placed", "running", "preempting", "interrupted", "succeeded", "failed",
  "cancelled", "rejected"];
const GPU_STATES = ["busy", "free", "reserved", "cordoned", "failed", "spare"];
const view = { cell: null, cursors: [null], page: 0, stream: null, timer: null, loading: false, again: false,
  summary: null };

function token() { return sessionStorage.getItem("gangway-token"); }

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v; else if (k === "style") node.style.cssText = v;
    else if (k.startsWith("data-") || k === "title" || k === "href") node.setAttribute(k, v); else node[k] = v;
  }
  for (const child of children.flat()) if (child != null) node.append(child);
  return node;
}

function teamColour(team) {
  let h = 0;
  for (const c of team || "") h = (h * 31 + c.charCodeAt(0)) % 360;
  return `hsl(${h} 62% 48%)`;
}

function when(ms) { return ms == null ? "" : new Date(ms).toISOString().replace("T", " ").slice(0, 19); }

function span(ms) {
  if (ms == null || ms < 0) return "";
  const s = Math.floor(ms / 1000);
  if (s < 120) return `${s} s`;
  if (s < 7200) return `${Math.floor(s / 60)} min`;
  return `${Math.floor(s / 3600)} h ${Math.floor(s % 3600 / 60)} min`;
}

class Unauthorized extends Error {}

async function api(path, params = {}) {
  const query = new URLSearchParams(Object.entries(params).filter(([, v]) => v !== "" && v != null));
  const response = await fetch(`${path}${query.size ? "?" + query : ""}`,
    { headers: { Authorization: `Bearer ${token()}` } });
  const body = await response.json();
  if (response.status === 401) throw new Unauthorized(body.message);
  if (!response.ok) throw new Error(body.message || response.statusText);
  return body;
}

// --- sign in -------------------------------------------------------------------------------------

function showLogin(message) {
  $("login").hidden = false;
  $("overview").hidden = true;
  $("job-page").hidden = true;
  $("login-error").textContent = message || "";
}

$("login-form").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem("gangway-token", $("token").value.trim());
  start();
});

$("sign-out").addEventListener("click", () => {
  sessionStorage.removeItem("gangway-token");
  if (view.stream) view.stream.close();
  showLogin();
});

// --- overview ------------------------------------------------------------------------------------

function renderLegend() {
  $("legend").replaceChildren(...GPU_STATES.map((s) => el("span", {},
    el("i", { class: `gpu ${s}`, style: s === "busy" ? "background: #888" : "" }), s === "busy" ? "busy (team colour)" : s)));
}

function renderHeatmap(nodes, levels) {
  const blocks = new Map();
  for (const node of nodes) {
    const outer = levels.length > 1 ? node.domains[levels[0]] : "";
    const inner = levels.length ? node.domains[levels[levels.length - 1]] : "";
    if (!blocks.has(outer)) blocks.set(outer, new Map());
    const racks = blocks.get(outer);
    if (!racks.has(inner)) racks.set(inner, []);
    racks.get(inner).push(node);
  }
  const out = [];
  for (const [block, racks] of blocks) {
    const rackEls = [];
    for (const [rack, members] of racks) {
      rackEls.push(el("div", { class: "rack" }, el("b", {}, rack),
        members.map((node) => el("div", { class: `node ${node.state}`, "data-node": node.name,
          title: `${node.name} (${node.state})` },
        node.gpu.map((gpu) => el("i", {
          class: `gpu ${gpu.state}`, "data-state": gpu.state,
          style: gpu.state === "busy" ? `background: ${teamColour(gpu.team)}` : "",
          title: `${node.name} GPU ${gpu.index}: ${gpu.state}${gpu.team ? " · " + gpu.team : ""}` +
            `${gpu.job_id ? " · " + gpu.job_id : ""}` }))))));
    }
    out.push(el("div", { class: "block" }, el("b", {}, block), el("div", { class: "racks" }, rackEls)));
  }
  $("heatmap").replaceChildren(...out);
}

function renderQuotas(teams) {
  const out = [];
  for (const team of teams) {
    for (const q of team.quotas) {
      const scale = Math.max(q.nominal, q.used, 1) * 1.05;
      const pct = (n) => `${(100 * n / scale).toFixed(2)}%`;
      const within = Math.min(q.used, q.nominal);
      out.push(el("div", { "data-team": team.team },
        el("div", { class: "quota-label" },
          el("span", {}, el("b", {}, team.team), ` ${q.gpu_type}`),
          el("span", {}, `used ${q.used} / nominal ${q.nominal} · borrowed ${q.borrowed} · lent ${q.lent} · ` +
            `share ${q.weighted_share}`)),
        el("div", { class: "bar" },
          el("span", { class: "used", style: `left: 0; width: ${pct(within)}; background: ${teamColour(team.team)}` }),
          el("span", { class: "lent", style: `left: ${pct(within)}; width: ${pct(Math.min(q.lent, q.nominal - within))}` }),
          el("span", { class: "borrowed", style: `left: ${pct(q.nominal)}; width: ${pct(q.borrowed)}; ` +
            `background-color: ${teamColour(team.team)}` }),
          el("span", { class: "nominal", style: `left: 0; width: ${pct(q.nominal)}` }))));
    }
  }
  $("quotas").replaceChildren(...(out.length ? out : [el("p", {}, "no quotas yet")]));
}

function renderQueues(queues) {
  $("queues").replaceChildren(...queues.map((q) => el("div", { class: "queue", "data-team": q.team },
    el("b", { style: `color: ${teamColour(q.team)}` }, q.team), ` ${q.waiting} waiting`,
    q.waiting ? ": " + Object.entries(q.reasons).map(([r, n]) => `${r} ${n}`).join(", ") : "",
    el("ul", {}, q.jobs.slice(0, 5).map((j) => el("li", {},
      el("a", { href: `#/job/${encodeURIComponent(j.job_id)}` }, j.job_id),
      ` #${j.team_position} in team, #${j.cell_position} in cell, start ` +
      (j.estimated_start == null ? `unknown (${j.basis})` : `in ${span(j.estimated_start - view.summary.now)}`)))))));
}

function renderJobs(page) {
  const now = view.summary ? view.summary.now : 0;
  $("jobs").tBodies[0].replaceChildren(...page.jobs.map((j) => el("tr", { "data-job": j.job_id },
    el("td", {}, el("a", { href: `#/job/${encodeURIComponent(j.job_id)}` }, j.job_id)),
    el("td", {}, el("span", { style: `color: ${teamColour(j.team)}` }, j.team)),
    el("td", {}, el("span", { class: `state ${j.state}` }, j.state)),
    el("td", {}, String(j.priority)), el("td", {}, `${j.gpus} ${j.gpu_type}`),
    el("td", {}, when(j.submitted_at)), el("td", {}, span(now - j.updated_at)),
    el("td", { class: "reason", title: j.detail }, j.reason + (j.detail ? ` — ${j.detail}` : "")),
    el("td", {}, j.nodes.join(", ")))));
  view.cursors[view.page + 1] = page.next_cursor;
  $("next").disabled = !page.next_cursor;
  $("first").disabled = view.page === 0;
  $("page-info").textContent = `page ${view.page + 1}`;
}

function renderDecisions(items) {
  $("decisions").replaceChildren(...items.map((d) => el("li", {},
    `${d.offset} ${when(d.at)} ${d.type} ${d.job_id || d.node || d.team || ""} ${d.reason} ${d.detail}`)));
}

function fillTeams(summary, teams) {
  const select = $("f-team");
  const names = [...new Set([...teams.map((t) => t.team), ...Object.keys(summary.jobs_by_team)])].sort();
  const have = [...select.options].map((o) => o.value).slice(1);
  if (have.join() !== names.join()) {
    const chosen = select.value;
    select.replaceChildren(el("option", { value: "" }, "all"), ...names.map((n) => el("option", { value: n }, n)));
    select.value = chosen;
  }
}

function filters() {
  return { team: $("f-team").value, state: $("f-state").value, priority: $("f-priority").value,
    sort: $("f-sort").value, limit: $("f-limit").value };
}

async function loadOverview() {
  const base = `/api/v1/cells/${encodeURIComponent(view.cell)}`;
  const [summary, nodes, teams, queues, page, decisions] = await Promise.all([
    api(base), api(`${base}/nodes`), api(`${base}/teams`), api(`${base}/queues`),
    api(`${base}/jobs`, { ...filters(), cursor: view.cursors[view.page] }), api(`${base}/decisions`, { limit: 15 })]);
  view.summary = summary;
  const g = summary.gpus;
  $("fleet-counts").textContent = `${summary.nodes} nodes · ${g.busy} busy, ${g.free} free, ${g.reserved} reserved, ` +
    `${g.cordoned} cordoned, ${g.failed} failed GPUs`;
  $("status").textContent = `offset ${summary.offset} · event time ${when(summary.now)} · lag ${summary.lag.seconds} s`;
  renderHeatmap(nodes.nodes, nodes.levels);
  renderQuotas(teams);
  renderQueues(queues);
  fillTeams(summary, teams);
  renderJobs(page);
  renderDecisions(decisions);
}

// --- one job -------------------------------------------------------------------------------------

function pairs(list, entries) {
  list.replaceChildren(...entries.filter(([, v]) => v !== undefined).flatMap(([k, v]) =>
    [el("dt", {}, k), el("dd", { "data-field": k }, v == null || v === "" ? "—" : String(v))]));
}

async function loadJob(jobId) {
  const job = await api(`/api/v1/cells/${encodeURIComponent(view.cell)}/jobs/${encodeURIComponent(jobId)}`);
  const s = job.spec;
  $("job-title").replaceChildren(`${job.job_id} `, el("span", { class: `state ${job.state}` }, job.state),
    el("small", {}, ` team ${job.team}`));
  pairs($("job-spec"), [["gang", `${s.workers} × ${s.gpus_per_worker} ${s.gpu_type} (${s.gpus} GPUs)`],
    ["min workers", s.min_workers], ["priority", `${s.priority}${s.preemptible ? " (preemptible)" : ""}`],
    ["topology", s.topology_required ? `required ${s.topology_required}` :
      s.topology_preferred ? `preferred ${s.topology_preferred}` : ""],
    ["time limit", s.time_limit_ms == null ? "" : span(s.time_limit_ms)], ["max restarts", s.max_restarts],
    ["submitted", when(job.submitted_at)]]);
  const q = job.queue;
  pairs($("job-where"), [["state", job.state], ["reason", job.reason], ["detail", job.detail],
    ["queue position", q ? `${q.team_position} of ${q.team_waiting} in ${job.team}, ${q.cell_position} of ` +
      `${q.cell_waiting} in the cell` : undefined],
    ["estimated start", q ? (q.estimated_start == null ? `unknown (${q.basis})` :
      `${when(q.estimated_start)} (${q.basis})`) : undefined],
    ["how", q ? q.detail : undefined],
    ["placement", job.placement.nodes.length ? `${job.placement.nodes.join(", ")}` +
      (job.placement.domain ? ` in ${job.placement.domain}` : "") : ""],
    ["attempt", `${job.attempt} (restarts ${job.restarts})`], ["GPUs held", job.gpus_held],
    ["borrowed", job.borrowed], ["checkpoint", job.checkpoint ? `${job.checkpoint.checkpoint_id} ` +
      `(${span(job.checkpoint.progress_ms)} of progress)` : ""]]);
  $("timeline").replaceChildren(...job.timeline.map((e) => el("li", { "data-type": e.type },
    el("span", {}, `@${e.offset}`), el("span", {}, when(e.at)), el("b", {}, e.type), el("span", {}, e.reason),
    el("span", {}, e.detail))));
}

// --- routing, refresh and the live stream -------------------------------------------------------

function route() {
  const match = location.hash.match(/^#\/job\/(.+)$/);
  return match ? { job: decodeURIComponent(match[1]) } : { job: null };
}

async function refresh() {
  if (view.loading) { view.again = true; return; }
  view.loading = true;
  try {
    const { job } = route();
    $("login").hidden = true;
    $("overview").hidden = !!job;
    $("job-page").hidden = !job;
    if (job) await loadJob(job); else await loadOverview();
  } catch (error) {
    if (error instanceof Unauthorized) { showLogin(error.message); return; }
    $("status").textContent = `error: ${error.message}`;
  } finally {
    view.loading = false;
    if (view.again) { view.again = false; setTimeout(refresh, 0); }
  }
}

function soon() {  // many events in a burst make one reload
  if (!view.timer) view.timer = setTimeout(() => { view.timer = null; refresh(); }, 150);
}

function follow() {
  if (view.stream) view.stream.close();
  const query = new URLSearchParams({ cell: view.cell, access_token: token() });
  view.stream = new EventSource(`/api/v1/stream?${query}`);
  for (const kind of ["progress", "decision", "request"]) view.stream.addEventListener(kind, soon);
  view.stream.addEventListener("reset", soon);
}

async function start() {
  if (!token()) { showLogin(); return; }
  try {
    const cells = await api("/api/v1/cells");
    const select = $("cell");
    select.replaceChildren(...cells.map((c) => el("option", { value: c.cell }, c.cell)));
    view.cell = view.cell && cells.some((c) => c.cell === view.cell) ? view.cell : cells[0].cell;
    select.value = view.cell;
    $("who").textContent = "signed in";
  } catch (error) {
    showLogin(error instanceof Unauthorized ? error.message : `cannot reach the API: ${error.message}`);
    return;
  }
  follow();
  refresh();
}

function resetPaging() { view.cursors = [null]; view.page = 0; refresh(); }

$("f-state").append(...STATES.map((s) => el("option", { value: s }, s)));
for (const id of ["f-team", "f-state", "f-sort", "f-limit"]) $(id).addEventListener("change", resetPaging);
$("f-priority").addEventListener("input", resetPaging);
$("filters").addEventListener("submit", (event) => event.preventDefault());
$("next").addEventListener("click", () => { view.page += 1; refresh(); });
$("first").addEventListener("click", resetPaging);
$("cell").addEventListener("change", () => { view.cell = $("cell").value; resetPaging(); follow(); });
window.addEventListener("hashchange", () => {
  if (location.hash.startsWith("#token=")) return;
  refresh();
});

const fragment = location.hash.match(/^#token=(.+)$/);
if (fragment) {
  sessionStorage.setItem("gangway-token", decodeURIComponent(fragment[1]));
  history.replaceState(null, "", location.pathname + "#/");
}
renderLegend();
start();
