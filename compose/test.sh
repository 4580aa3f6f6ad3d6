#!/usr/bin/env bash
# Runs Gangway's whole test suite; installs what it needs first. Extra arguments go to pytest.
source "$(dirname "$0")/bootstrap.sh"
# The browser tests drive Debian's Chromium (Playwright's own browser download does not work here).
if [ ! -x /usr/bin/chromium ]; then
    echo "gangway: installing Debian's chromium for the browser tests" >&2
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null \
        || echo "gangway: could not install chromium; the browser tests will fail" >&2
fi
set +e
python -m pytest "$@"
status=$?
if [ "$status" -eq 5 ]; then
    echo "gangway: pytest collected no tests; that counts as a failure" >&2
    exit 1
fi
# Tests marked `pure` patch the core's source, which its compiled build does not see (events/compiled.py): they
# were skipped above and run here, with the core from source. A selection with none of them is no failure here.
if [ "$(python -c 'from events.compiled import install; print(install())')" = compiled ]; then
    GANGWAY_PURE=1 python -m pytest -m pure "$@"
    pure=$?
    if [ "$pure" -ne 0 ] && [ "$pure" -ne 5 ]; then
        status=$pure
    fi
fi
exit "$status"
