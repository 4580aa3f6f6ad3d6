"""Reads job traces (../shared/traces) into (team, submit s, duration s, GPUs) rows, and node lists.

Job traces: the Microsoft ITP CSVs (`submission_time, duration, num_gpu`; the cluster id, i.e. the
file name, is the team) and the Philly VC file (`submit_time, num_gpu, duration`; the file name is
the team). A folder means every trace CSV in it; `trace_rows` also keeps each job's row number (for
`gangway load`). Node lists: the Alibaba openb node CSV
(`sn, gpu, model`), a heterogeneous cell.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

#: Where the shared traces sit beside a checkout of this repository.
TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
ITP = TRACES / "microsoft-itp-2021"

#: Column names of each job-trace format we read: (submit, duration, GPUs).
_FORMATS = (("submission_time", "duration", "num_gpu"), ("submit_time", "duration", "num_gpu"))


class TraceJob(NamedTuple):
    cluster: str  # the team: ITP cluster id or trace file name
    submit_s: int
    duration_s: int
    gpus: int
    row: int = 0  # position in its file (0 = first job)


class TraceNode(NamedTuple):
    name: str
    gpu_type: str
    gpus: int


def _columns(header: Iterable[str]) -> tuple[str, str, str] | None:
    names = set(header)
    return next((f for f in _FORMATS if set(f) <= names), None)


def trace_files(path: Path) -> list[Path]:
    """The job-trace CSVs at `path`: the file itself, or every recognised CSV in the folder."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise FileNotFoundError(f"no trace at {path}")
    found = []
    for candidate in sorted(path.glob("*.csv")):
        with candidate.open() as f:
            if _columns(next(csv.reader(f), [])) is not None:
                found.append(candidate)
    if not found:
        raise FileNotFoundError(f"no job-trace CSV (ITP or Philly columns) in {path}")
    return found


def read_jobs(paths: Iterable[Path]) -> list[TraceJob]:
    """Jobs of every trace file, merged in submission order (ties: file name, then row).

    Jobs asking for no GPU are skipped. Raises ValueError for a file in an unknown format."""
    rows = []
    for path in paths:
        with _opened(path) as f:
            reader = csv.DictReader(f)
            columns = _columns(reader.fieldnames or [])
            if columns is None:
                raise ValueError(f"{path}: not an ITP or Philly job trace (columns {reader.fieldnames})")
            submit, duration, gpus = columns
            stem = path.stem
            for i, row in enumerate(reader):
                job = TraceJob(stem, _count(path, i, row, submit), _count(path, i, row, duration),
                               _count(path, i, row, gpus, whole=True), i)
                if job.gpus > 0:
                    rows.append((job.submit_s, stem, i, job))
    rows.sort(key=lambda r: r[:3])
    return [r[3] for r in rows]


def itp_jobs(folder: Path = ITP, limit: int | None = None) -> list[TraceJob]:
    """All ITP jobs of a folder (or one CSV file) merged in submission order (ties by cluster, then row).
    Raises FileNotFoundError when there is no such file and the folder holds no cluster*.csv."""
    paths = [folder] if folder.is_file() else sorted(folder.glob("cluster*.csv"))
    if not paths:
        raise FileNotFoundError(f"no ITP trace at {folder} (a CSV file, or a folder of cluster*.csv)")
    jobs = read_jobs(paths)
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
        with _opened(csv_path) as f:
            reader = csv.DictReader(f)
            submit = next((c for c in _SUBMIT_COLUMNS if c in (reader.fieldnames or ())), None)
            if submit is None or not {"duration", "num_gpu"} <= set(reader.fieldnames or ()):
                raise ValueError(f"{csv_path}: needs columns {' or '.join(_SUBMIT_COLUMNS)}, duration, num_gpu")
            stem = csv_path.stem
            for i, row in enumerate(reader):
                rows.append(TraceRow(stem, i, _count(csv_path, i, row, submit), _count(csv_path, i, row, "duration"),
                                     _count(csv_path, i, row, "num_gpu", whole=True)))
    rows.sort(key=lambda r: (r.submit_s, r.cluster, r.row))
    return rows


def read_nodes(path: Path) -> list[TraceNode]:
    """GPU nodes of a node list with `sn, gpu, model` columns (the Alibaba openb list); CPU-only nodes are left out."""
    with _opened(path) as f:
        reader = csv.DictReader(f)
        if not {"sn", "gpu", "model"} <= set(reader.fieldnames or []):
            raise ValueError(f"{path}: expected columns sn, gpu, model (got {reader.fieldnames})")
        nodes = [TraceNode(row["sn"], row["model"], _count(path, i, row, "gpu", whole=True) if row["gpu"] else 0)
                 for i, row in enumerate(reader)]
    gpu_nodes = [node for node in nodes if node.gpus > 0 and node.gpu_type]
    if not gpu_nodes:
        raise ValueError(f"{path}: lists no node with GPUs")
    return gpu_nodes


@contextmanager
def _opened(path: Path) -> Iterator[Iterator[str]]:
    """The lines of a CSV file; a file that is not UTF-8 text raises ValueError naming it."""
    with path.open(encoding="utf-8", newline="") as f:
        try:
            yield f
        except UnicodeDecodeError as error:
            raise ValueError(f"{path}: not text (UTF-8): {error.reason} at byte {error.start}") from None


#: Past this a float no longer holds every whole number: a count beyond it is no count a trace could mean.
_EXACT = 2**53


def _count(path: Path, index: int, row: dict[str, str | None], column: str, whole: bool = False) -> int:
    """A non-negative number of a trace's row, in whole units ('12.0' reads as 12); seconds may have a fraction,
    which is dropped, `whole` counts (GPUs) may not. Raises ValueError naming the file, its line and the column."""
    text = row.get(column)
    try:
        value = float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        value = math.nan
    if not math.isfinite(value) or not 0 <= value < _EXACT:
        raise ValueError(f"{path} line {index + 2}: {column} {text!r} is not a number of at least 0 "
                         f"(and below 2**53)")
    if whole and not value.is_integer():
        raise ValueError(f"{path} line {index + 2}: {column} {text!r} is not a whole number")
    return int(value)


def gang_shape(gpus: int, gpus_per_node: int = 8) -> tuple[int, int]:
    """(workers, GPUs per worker): up to a node's worth in one worker, bigger jobs as whole-node workers."""
    if gpus <= gpus_per_node:
        return 1, gpus
    return -(-gpus // gpus_per_node), gpus_per_node
