# Sourced by the other scripts: makes .venv with Gangway and its test tools installed, once per pyproject change.
set -euo pipefail
GANGWAY_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${GANGWAY_VENV:-$GANGWAY_ROOT/.venv}"
# The interpreter: $PYTHON if set; else the one an earlier pick made .venv from; else the best one on this machine
# (compose/pick_python.py says which and why: it probes each, so it runs only while there is no such .venv).
MADE_BY="$VENV/.gangway-python"  # "<interpreter> <version>" of the interpreter .venv was made from
if [ -z "${PYTHON:-}" ] && [ -x "$VENV/bin/python" ] && [ -f "$MADE_BY" ]; then
    PYTHON="$(cat "$MADE_BY")"
    PYTHON="${PYTHON% *}"
elif [ -z "${PYTHON:-}" ]; then
    PYTHON="$(python3 "$GANGWAY_ROOT/compose/pick_python.py" 2>/dev/null || true)"
    PYTHON="${PYTHON:-python3}"
fi
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "gangway: Python 3.11 or newer is needed (found: $("$PYTHON" --version 2>&1))" >&2
    exit 1
fi
# A virtualenv made from another interpreter than the one chosen now is made again.
CHOSEN="$(command -v "$PYTHON") $("$PYTHON" -c 'import sys; print(sys.version.split()[0])')"
if [ -x "$VENV/bin/python" ] && [ "$(cat "$MADE_BY" 2>/dev/null)" != "$CHOSEN" ]; then
    echo "gangway: making $VENV again from $CHOSEN" >&2
    rm -rf "$VENV"
fi
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
    echo "$CHOSEN" > "$MADE_BY"
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
