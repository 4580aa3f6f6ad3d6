#!/usr/bin/env bash
# Runs Gangway's whole test suite; installs what it needs first. Extra arguments go to pytest.
source "$(dirname "$0")/bootstrap.sh"
set +e
python -m pytest "$@"
status=$?
if [ "$status" -eq 5 ]; then
    echo "gangway: pytest collected no tests; that counts as a failure" >&2
    exit 1
fi
exit "$status"
