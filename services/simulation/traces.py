"""Reads the Microsoft ITP job traces (../shared/traces) into (cluster, submit s, duration s, GPUs) rows;
`trace_rows` also reads the Philly CSV and keeps each job's row number."""

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


class TraceRow(NamedTuple):
    """One job of a trace file: its file stem, 0-based data row, submit time, duration and GPUs."""

    cluster: str
    row: int
    submit_s: int
    duration_s: int
    gpus: int


#: Column names of the submit time in the trace formats we read: ITP, Philly (ElasticFlow's copy).
_SUBMIT_COLUMNS = ("submission_time", "submit_time")


def trace_rows(path: Path) -> list[TraceRow]:
    """Every job of a CSV file, or of all cluster*.csv in a folder, in submission order (ties: file, row)."""
    paths = [path] if path.is_file() else sorted(path.glob("cluster*.csv"))
    if not paths:
        raise FileNotFoundError(f"no trace at {path} (a CSV file, or a folder of cluster*.csv)")
    rows = []
    for csv_path in paths:
        with csv_path.open() as f:
            reader = csv.DictReader(f)
            submit = next((c for c in _SUBMIT_COLUMNS if c in (reader.fieldnames or ())), None)
            if submit is None or not {"duration", "num_gpu"} <= set(reader.fieldnames or ()):
                raise ValueError(f"{csv_path}: needs columns {' or '.join(_SUBMIT_COLUMNS)}, duration, num_gpu")
            for i, row in enumerate(reader):
                rows.append(TraceRow(csv_path.stem, i, int(float(row[submit])), int(float(row["duration"])),
                                     int(row["num_gpu"])))
    rows.sort(key=lambda r: (r.submit_s, r.cluster, r.row))
    return rows


def gang_shape(gpus: int, gpus_per_node: int = 8) -> tuple[int, int]:
    """(workers, GPUs per worker): up to a node's worth in one worker, bigger jobs as whole-node workers."""
    if gpus <= gpus_per_node:
        return 1, gpus
    return gpus // gpus_per_node, gpus_per_node
