"""Reads the Microsoft ITP job traces (../shared/traces) into (cluster, submit s, duration s, GPUs) rows."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import NamedTuple

#: Where the shared traces sit beside a checkout of this repository.
TRACES = Path(__file__).resolve().parents[3] / "shared" / "traces"
ITP = TRACES / "microsoft-itp-2021"


class TraceJob(NamedTuple):
    cluster: str
    submit_s: int
    duration_s: int
    gpus: int


def itp_jobs(folder: Path = ITP, limit: int | None = None) -> list[TraceJob]:
    """All ITP jobs of a folder (or one CSV file) merged in submission order (ties by cluster, then row)."""
    rows = []
    paths = [folder] if folder.is_file() else sorted(folder.glob("cluster*.csv"))
    for path in paths:
        with path.open() as f:
            for i, row in enumerate(csv.DictReader(f)):
                rows.append((int(float(row["submission_time"])), path.stem, i,
                             TraceJob(path.stem, int(float(row["submission_time"])), int(float(row["duration"])),
                                      int(row["num_gpu"]))))
    rows.sort(key=lambda r: r[:3])
    jobs = [r[3] for r in rows]
    return jobs[:limit] if limit is not None else jobs


def gang_shape(gpus: int, gpus_per_node: int = 8) -> tuple[int, int]:
    """(workers, GPUs per worker): up to a node's worth in one worker, bigger jobs as whole-node workers."""
    if gpus <= gpus_per_node:
        return 1, gpus
    return gpus // gpus_per_node, gpus_per_node
