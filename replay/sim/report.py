"""Markdown tables and PNG plots (matplotlib) of simulation results, one result JSON per policy."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

H = 3600.0

#: (header, metric, format) of the comparison table.
COLUMNS = (
    ("avg JCT (h)", "avg_jct_s", lambda v: f"{v / H:.2f}"),
    ("p50 JCT (h)", "p50_jct_s", lambda v: f"{v / H:.2f}"),
    ("p99 JCT (h)", "p99_jct_s", lambda v: f"{v / H:.1f}"),
    ("avg queue (h)", "avg_queue_s", lambda v: f"{v / H:.2f}"),
    ("p99 queue (h)", "p99_queue_s", lambda v: f"{v / H:.1f}"),
    ("makespan (d)", "makespan_s", lambda v: f"{v / 86400:.1f}"),
    ("utilization", "utilization", lambda v: f"{v:.1%}"),
    ("idle while waiting", "idle_while_waiting", lambda v: f"{v:.1%}"),
    ("preemptions", "preemptions", lambda v: f"{v:,}"),
    ("futile preemptions", "futile_preemptions", lambda v: f"{v:,}"),
    ("most preemptions of one job", "max_preemptions_of_one_job", lambda v: f"{v:,}"),
    ("GPU-h lost", "gpu_hours_lost", lambda v: f"{v:,.0f}"),
    ("effective training", "effective_training_ratio", lambda v: f"{v:.1%}"),
    ("multi-node gangs in 1 rack", "multi_node_gangs_in_one_rack", lambda v: f"{v:.1%}"),
    ("GPUs stranded on partly used nodes", "stranded_gpus", lambda v: f"{v:.1%}"),
)


def worst_team(result: dict) -> tuple[str, float] | None:
    """The team whose shared-cell queueing exceeds its private cluster's the most: (team, ratio)."""
    ratios = [(entry["queue_vs_private"], team) for team, entry in result["metrics"]["per_team"].items()
              if entry.get("queue_vs_private") is not None]
    if not ratios:
        return None
    ratio, team = max(ratios)
    return team, ratio


def table(results: Sequence[dict]) -> str:
    """One row per policy: the headline metrics."""
    header = ["policy", *[c[0] for c in COLUMNS], "worst team queue / private"]
    rows = [header, ["---"] * len(header)]
    for r in results:
        metrics = r["metrics"]
        worst = worst_team(r)
        rows.append([r["policy"]["name"], *[fmt(metrics[key]) for _, key, fmt in COLUMNS],
                     f"{worst[1]:.2f} ({worst[0]})" if worst else "n/a"])
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)


def team_table(results: Sequence[dict]) -> str:
    """Per team: nominal quota, and average queueing (h) shared / private under each policy."""
    teams = results[0]["trace"]["teams"]
    header = ["team", "jobs", "nominal GPUs", *[f"{r['policy']['name']} shared / private (h)" for r in results]]
    rows = [header, ["---"] * len(header)]
    for team in teams:
        first = results[0]["metrics"]["per_team"][team]
        cells = [team, f"{first['jobs']:,}", f"{first['nominal_gpus']:,}"]
        for r in results:
            entry = r["metrics"]["per_team"][team]
            private = entry.get("private_avg_queue_s")
            cells.append(f"{entry['avg_queue_s'] / H:.2f} / " + (f"{private / H:.2f}" if private is not None else "n/a"))
        rows.append(cells)
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)


def markdown(results: Sequence[dict]) -> str:
    first = results[0]
    cluster, trace, config = first["cluster"], first["trace"], first["config"]
    lines = [
        f"# Simulation: {', '.join(r['policy']['name'] for r in results)}",
        "",
        f"Trace: {', '.join(trace['files'])} ({trace['jobs']:,} jobs, {trace['gpu_hours']:,.0f} GPU-hours, "
        f"{trace['span_s'] / 86400:.1f} days of arrivals). Cell: {cluster['gpus']:,} GPUs on {cluster['nodes']:,} "
        f"nodes ({cluster['source']}), racks of {cluster['nodes_per_rack']} nodes, blocks of "
        f"{cluster['racks_per_block']} racks. Seed {config['seed']}, tick {config['tick_s']} s, checkpoint every "
        f"{(config['checkpoint_every_s'] or 0) / 60:.0f} min (cost {config['checkpoint_cost_s']} s), restart cost "
        f"{config['restart_cost_s']} s, {config['failures_per_1000_gpu_days']} GPU failures per 1,000 GPU-days.",
        "",
        table(results),
        "",
    ]
    if len(trace["teams"]) > 1:
        lines += ["Average queueing per team, shared cell / the team alone on a private cluster of its nominal quota:",
                  "", team_table(results), ""]
    lines += ["![JCT CDF](jct_cdf.png)", "", "![queueing per team](team_queue.png)", "",
              "![GPUs in use](gpus_in_use.png)", ""]
    return "\n".join(lines)


def write(results: Sequence[dict], folder: Path) -> list[Path]:
    """report.md plus jct_cdf.png, team_queue.png and gpus_in_use.png in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    written = [folder / "report.md"]
    written[0].write_text(markdown(results))
    written += plot(results, folder)
    return written


def plot(results: Sequence[dict], folder: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = []
    # JCT CDF per policy (from the percentiles kept in each result)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in results:
        points = r["jct_percentiles_s"]
        ax.plot([max(v / H, 1e-3) for v in points], [p / 100 for p in range(len(points))], label=r["policy"]["name"])
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (hours, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title("JCT CDF")
    ax.grid(True, alpha=0.3)
    ax.legend()
    out.append(_save(fig, folder / "jct_cdf.png"))

    # queueing delay per team: shared cell (bars) against the private cluster (markers)
    teams = results[0]["trace"]["teams"]
    fig, ax = plt.subplots(figsize=(max(7, 1.1 * len(teams) * len(results) / 2), 4.5))
    width = 0.8 / len(results)
    for k, r in enumerate(results):
        xs = [i + (k - (len(results) - 1) / 2) * width for i in range(len(teams))]
        per_team = r["metrics"]["per_team"]
        bars = ax.bar(xs, [per_team[t]["avg_queue_s"] / H for t in teams], width, label=f"{r['policy']['name']} shared")
        private = [(x, per_team[t]["private_avg_queue_s"] / H) for x, t in zip(xs, teams)
                   if per_team[t].get("private_avg_queue_s") is not None]
        if private:
            ax.scatter([x for x, _ in private], [v for _, v in private], marker="_", s=120, color="black",
                       zorder=3, label="private cluster" if k == 0 else None)
        del bars
    ax.set_xticks(range(len(teams)), teams, rotation=30, ha="right")
    ax.set_ylabel("average queueing delay (hours)")
    ax.set_yscale("symlog", linthresh=0.1)
    ax.set_title("Queueing per team: shared cell (bars) vs private cluster of its nominal quota (black marks)")
    ax.title.set_fontsize(9)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    out.append(_save(fig, folder / "team_queue.png"))

    # GPUs in use over time
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for r in results:
        series = r["series"]
        step = series["sample_s"] / 86400
        ax.plot([i * step for i in range(len(series["gpus_in_use"]))], series["gpus_in_use"], linewidth=0.7,
                label=r["policy"]["name"])
    ax.axhline(results[0]["cluster"]["gpus"], color="black", linestyle="--", linewidth=0.8, label="capacity")
    ax.set_xlabel("days since the first submission")
    ax.set_ylabel("GPUs allocated")
    ax.set_title("GPUs in use over time (hourly samples)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    out.append(_save(fig, folder / "gpus_in_use.png"))
    return out


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def estimates_line(result: dict) -> str:
    """How the estimated starts fared, in one line."""
    e = result["estimates"]
    a, s = e["all"], e["at_submission_waited"]
    return (f"gangway sim: estimated starts ({e['policy']}): {a['estimates']:,} estimates, "
            f"{_pct(a['inside_share'])} inside their interval ({_pct(a['early_share'])} early, "
            f"{_pct(a['late_share'])} late, {_pct(a['unknown_share'])} unknown), "
            f"median error {a['median_abs_error_s']} s, "
            f"median interval {a['median_interval_s']} s; at submission of jobs that waited: {s['estimates']:,}, "
            f"{_pct(s['inside_share'])} inside, median error {s['median_abs_error_s']} s")


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{share:.1%}"
