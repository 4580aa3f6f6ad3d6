"""GPU health from `nvidia-smi` where it exists: uncorrected ECC errors (counted per GPU) and Xid errors
from the kernel log (`dmesg`), turned into the Xid codes recovery classifies (services/recovery/xid.py).
On a machine without `nvidia-smi` there is nothing to report."""

from __future__ import annotations

import re
import shutil
import subprocess

DOUBLE_BIT_ECC_XID = 48  # what an uncorrected ECC error means to recovery: retire the GPU
_XID_LINE = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f:.]+)\): (\d+)")


def parse_ecc(csv: str) -> dict[int, int]:
    """`nvidia-smi --query-gpu=index,ecc.errors.uncorrected.volatile.total --format=csv,noheader,nounits`
    -> GPU index -> uncorrected errors ('[N/A]' counts as 0)."""
    out = {}
    for line in csv.strip().splitlines():
        index, _, count = (part.strip() for part in line.partition(","))
        if index.isdigit():
            out[int(index)] = int(count) if count.isdigit() else 0
    return out


def parse_bus_ids(csv: str) -> dict[str, int]:
    """`nvidia-smi --query-gpu=index,pci.bus_id --format=csv,noheader` -> normalised bus id -> GPU index."""
    out = {}
    for line in csv.strip().splitlines():
        index, _, bus = (part.strip() for part in line.partition(","))
        if index.isdigit():
            out[_bus(bus)] = int(index)
    return out


def parse_xids(kernel_log: str, bus_to_index: dict[str, int]) -> list[tuple[int, int, str]]:
    """(GPU index, Xid, line) for every Xid line of the kernel log on a GPU of this node."""
    out = []
    for line in kernel_log.splitlines():
        found = _XID_LINE.search(line)
        if found and _bus(found.group(1)) in bus_to_index:
            out.append((bus_to_index[_bus(found.group(1))], int(found.group(2)), line.strip()))
    return out


def _bus(bus_id: str) -> str:
    """'00000000:3B:00.0' and '0000:3b:00' name the same device: compare bus:device only."""
    parts = bus_id.lower().split(":")
    return ":".join(parts[-2:]).split(".")[0] if len(parts) >= 2 else bus_id.lower()


class GpuHealth:
    """Polls nvidia-smi (and the kernel log) for new errors: `poll()` returns (gpu, xid, message) for each one
    seen since the last poll."""

    def __init__(self) -> None:
        self.available = shutil.which("nvidia-smi") is not None
        self._ecc: dict[int, int] | None = None
        self._xids_seen: int | None = None

    def poll(self) -> list[tuple[int, int, str]]:
        if not self.available:
            return []
        found = []
        ecc = parse_ecc(_run(["nvidia-smi", "--query-gpu=index,ecc.errors.uncorrected.volatile.total",
                              "--format=csv,noheader,nounits"]))
        if self._ecc is not None:
            found += [(gpu, DOUBLE_BIT_ECC_XID, f"uncorrected ECC errors on GPU {gpu}: {self._ecc.get(gpu, 0)} -> {n}")
                      for gpu, n in sorted(ecc.items()) if n > self._ecc.get(gpu, 0)]
        self._ecc = ecc
        xids = parse_xids(_run(["dmesg"]), parse_bus_ids(_run(["nvidia-smi", "--query-gpu=index,pci.bus_id",
                                                                "--format=csv,noheader"])))
        if self._xids_seen is not None:  # the first poll sets the baseline: older errors are not news
            found += xids[self._xids_seen:]
        self._xids_seen = len(xids)
        return found


def _run(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
