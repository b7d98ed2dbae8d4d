#!/usr/bin/env bash
# One command from a fresh clone: create .venv, install everything pinned, fetch and check
# the Kafka connector jars and the Shuttle data file, then run what was asked:
#   bash deploy/bootstrap.sh demo [omldm demo options]   # the end-to-end demo
#   bash deploy/bootstrap.sh test [pytest options]       # the test suite
#   bash deploy/bootstrap.sh setup                       # install and fetch only
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-demo}"
shift || true

python="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "creating .venv with $($python --version)"
  "$python" -m venv .venv
fi
echo "installing pinned packages into .venv (first run: a few minutes)"
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[test]" 2> >(grep -v "is ignored: it is neither" >&2)
.venv/bin/omldm setup >/dev/null

case "$what" in
  setup) echo "ready: .venv/bin/omldm demo" ;;
  demo) exec .venv/bin/omldm demo "$@" ;;
  test)
    set +e
    .venv/bin/python -m pytest tests learning middleware operators "$@"
    rc=$?
    if [ "$rc" -eq 5 ]; then
      echo "pytest collected no tests: that is a failure" >&2
      exit 1
    fi
    exit "$rc"
    ;;
  *) echo "usage: bash deploy/bootstrap.sh [demo|test|setup] [options]" >&2; exit 2 ;;
esac
