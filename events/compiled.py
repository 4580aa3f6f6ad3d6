"""The compiled build of the pure core: the fold, the deciders and their in-memory driver, compiled to C by mypyc
(compose/compile_core.py).
Python imports a listed module from the build only while the build was made from exactly the sources beside it by
this very Python; otherwise, or with GANGWAY_PURE=1 set, the source runs. Both decide the same (a test holds it)."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from importlib.machinery import ExtensionFileLoader, ModuleSpec
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "native"
MANIFEST = BUILD / "manifest.json"

#: The modules compiled: the fold (projections), what the four deciders run on every event (services), and what
#: drives them in memory (the virtual cell, the simulated agents, the simulator's meter).
MODULES = (
    "projections.jobs", "projections.cell", "projections.cluster", "projections.evolve", "projections.reservations",
    "projections.validate", "projections.usage", "projections.tenancy", "projections.value", "projections.overlay",
    "services.core.decider", "services.core.heads", "services.core.placement", "services.core.queue",
    "services.core.quiet", "services.core.quota", "services.core.replica",
    "services.admitter.decide", "services.placer.decide", "services.preemptor.decide",
    "services.preemptor.consolidation", "services.preemptor.eviction", "services.preemptor.victims",
    "services.recovery.decide",
    "replay.runner", "services.agent.simulated", "replay.sim.metrics",
)


def source_of(module: str) -> Path:
    return ROOT.joinpath(*module.split(".")).with_suffix(".py")


def digest() -> str:
    """What a build is made from: the listed modules' sources and the Python that runs them."""
    h = hashlib.sha256(sys.version.encode())
    for module in MODULES:
        h.update(module.encode())
        h.update(source_of(module).read_bytes())
    return h.hexdigest()


class _Build:
    """Finds the listed modules (and mypyc's shared runtime module) in the build: a meta path finder (not derived
    from importlib.abc's, whose import costs every process a dozen milliseconds)."""

    def __init__(self, files: dict[str, Path]) -> None:
        self.files = files

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> ModuleSpec | None:
        file = self.files.get(fullname)
        if file is None:
            return None
        spec = ModuleSpec(fullname, ExtensionFileLoader(fullname, str(file)), origin=str(file))
        spec.has_location = True  # the module's __file__ is its build
        return spec


def _build() -> tuple[str, dict[str, str]]:
    """The build's state ('compiled' when it was made from these sources by this Python and is whole, else 'stale'
    or 'absent') and, compiled, its files by module name."""
    try:
        manifest = json.loads(MANIFEST.read_text())
    except (OSError, ValueError):
        return "absent", {}
    files = manifest.get("files", {})
    if manifest.get("digest") != digest() or not all((BUILD / f).is_file() for f in files.values()):
        return "stale", {}
    return "compiled", files


def built() -> str:
    """'compiled', 'stale' or 'absent' (`_build`)."""
    return _build()[0]


def _found() -> tuple[str, dict[str, str]]:
    """'pure' (GANGWAY_PURE=1) with no files, else what `_build` finds."""
    return ("pure", {}) if os.environ.get("GANGWAY_PURE") == "1" else _build()


def status() -> str:
    """'compiled', 'pure' (GANGWAY_PURE=1), 'stale' (the sources changed since the build) or 'absent'."""
    return _found()[0]


_answer: list[str] = []  # what the first install() of this process found


def install() -> str:
    """Puts the build ahead of the sources when it matches them; the first call decides for the process, later
    ones (each package that holds compiled modules calls it) return its answer: 'compiled', or `status()`'s."""
    if _answer:
        return _answer[0]
    state, files = _found()
    if state == "compiled" and any(name in sys.modules for name in files):
        state = "pure"  # imported from source already: one version of each module
    if state == "compiled":
        sys.meta_path.insert(0, _Build({name: BUILD / file for name, file in files.items()}))
    _answer.append(state)
    return state
