#!/usr/bin/env bash
# Run the whole test suite and fail loudly when anything fails or nothing runs.
set -uo pipefail
PY=${1:-python3}
cd "$(dirname "$0")/.."
"$PY" -m pytest "${@:2}"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "run-tests: FAILURE — pytest collected no tests (exit 5)" >&2
  exit 1
fi
if [ "$rc" -ne 0 ]; then
  echo "run-tests: FAILURE — pytest exited with status $rc" >&2
  exit "$rc"
fi
echo "run-tests: all tests passed"
