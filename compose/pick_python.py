"""Picks the Python that Gangway's virtualenv is made from, among those on this machine: prints its path.

Any Python 3.11+ that can make a virtualenv runs Gangway. Of those, one with its C headers is preferred (mypyc
compiles the core against them: a fifth less time per event), then one whose interpreter holds its runtime itself
rather than loading it from a shared libpython (Debian's Python, built so, ran the merged simulation 1.27x faster
here than pyenv's default build on a shared libpython; docs/benchmarks.md, "Stop 62"), then the first found on the
PATH. Called by bootstrap.sh with no arguments; runs on Python 3.7 or newer.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

#: Looked up on the PATH in this order, then the usual system locations.
NAMES = ("python3", "python3.13", "python3.12", "python3.11")
SYSTEM = ("/usr/bin/python3", "/usr/local/bin/python3")

#: Run by each candidate: what it is.
PROBE = r"""
import json, os, sys, sysconfig
try:
    import ensurepip, venv
    venv_ok = True
except ImportError:
    venv_ok = False
include = sysconfig.get_paths().get("include") or ""
try:
    with open("/proc/self/maps") as maps:
        shared = "libpython" in maps.read()
except OSError:
    shared = bool(sysconfig.get_config_var("Py_ENABLE_SHARED"))
print(json.dumps({"version": list(sys.version_info[:2]), "venv": venv_ok, "shared": shared,
                  "headers": os.path.exists(os.path.join(include, "Python.h"))}))
"""


def candidates() -> list[str]:
    """Interpreters on this machine, each once (by the file it resolves to), in the order looked up."""
    found, seen = [], set()
    for path in [shutil.which(name) for name in NAMES] + list(SYSTEM):
        if not path or not os.access(path, os.X_OK):
            continue
        real = os.path.realpath(path)
        if real not in seen:
            seen.add(real)
            found.append(path)
    return found


def probe(path: str) -> dict | None:
    """What `path` is (PROBE's answer), or None when it does not run."""
    try:
        done = subprocess.run([path, "-c", PROBE], capture_output=True, text=True, timeout=30)
        return json.loads(done.stdout) if done.returncode == 0 else None
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


def choose(facts: list[tuple[str, dict | None]]) -> str | None:
    """The interpreter to use, from (path, probe) in lookup order: a Python 3.11+ that makes virtualenvs, with its
    headers first, then not on a shared libpython, then the first found; None when none qualifies."""
    usable = [(i, path, f) for i, (path, f) in enumerate(facts)
              if f is not None and tuple(f["version"]) >= (3, 11) and f["venv"]]
    if not usable:
        return None
    return min(usable, key=lambda u: (not u[2]["headers"], u[2]["shared"], u[0]))[1]


def main() -> int:
    chosen = choose([(path, probe(path)) for path in candidates()])
    if chosen is None:
        print("gangway: no Python 3.11 or newer with venv was found on this machine", file=sys.stderr)
        return 1
    print(chosen)
    return 0


if __name__ == "__main__":
    sys.exit(main())
