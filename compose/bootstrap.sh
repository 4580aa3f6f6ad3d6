# Sourced by the other scripts: makes .venv with Gangway and its test tools installed, once per pyproject change.
set -euo pipefail
GANGWAY_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${GANGWAY_VENV:-$GANGWAY_ROOT/.venv}"
PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "gangway: Python 3.11 or newer is needed (found: $("$PYTHON" --version 2>&1))" >&2
    exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
STAMP="$VENV/.gangway-installed"
WANT="$(sha256sum "$GANGWAY_ROOT/pyproject.toml" | cut -d' ' -f1)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install --quiet -e "$GANGWAY_ROOT[test,native]"
    echo "$WANT" > "$STAMP"
fi
# An editable install leaves Gangway's own modules uncompiled, and where PYTHONDONTWRITEBYTECODE is set (as on this
# machine) each process would compile them again: a fifth of a command's start (docs/benchmarks.md). Compile the
# ones that changed now; Python takes a compiled module only while its source is unchanged.
"$VENV/bin/python" -m compileall -q -j 0 "$GANGWAY_ROOT"/{events,projections,services,replay} >/dev/null
# The fold and the deciders compiled to C (mypyc), once per change of their sources: about a minute; a fifth less
# time per event (docs/benchmarks.md). Without a C compiler the core runs from source and decides the same.
"$VENV/bin/python" "$GANGWAY_ROOT/compose/compile_core.py" || true
export PATH="$VENV/bin:$PATH"
cd "$GANGWAY_ROOT"
