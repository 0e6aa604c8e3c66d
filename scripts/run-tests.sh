#!/usr/bin/env bash
# Run the whole test suite and fail loudly when anything fails or nothing runs.
#
# The tests marked `kafka` need a real Apache Kafka broker: this script starts one with
# scripts/kafka.sh (fetching the jars with Maven on the first run), exports its address as
# DPBANDIT_TEST_KAFKA (and its run dir, so tests can restart it), runs pytest and always stops
# the broker again. If DPBANDIT_TEST_KAFKA is already set, that broker is used as is.
#
# The Prometheus tests (promtool rule tests, a real Prometheus scraping the service) need
# Debian's prometheus package: scripts/prometheus.sh gets it with apt into .cache/ (first run
# only) and DPBANDIT_PROMETHEUS_BIN_DIR points the tests at it. Without apt the run fails and
# says why (set DPBANDIT_PROMETHEUS_BIN_DIR to a directory with prometheus and promtool).
#
#   scripts/run-tests.sh [PYTHON] [pytest args...]
set -uo pipefail
PY=${1:-python3}
cd "$(dirname "$0")/.." || exit 1

if ! prom_bin=$(scripts/prometheus.sh fetch); then
  echo "run-tests: FAILURE — could not get Prometheus and promtool (see the messages above)" >&2
  exit 1
fi
export DPBANDIT_PROMETHEUS_BIN_DIR=$prom_bin
echo "run-tests: $("$prom_bin/promtool" --version 2>&1 | head -1) from $prom_bin" >&2

KAFKA_RUN_DIR=""
stop_kafka() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "$KAFKA_RUN_DIR" ]; then
    if ! DPBANDIT_KAFKA_RUN_DIR=$KAFKA_RUN_DIR scripts/kafka.sh stop; then
      echo "run-tests: FAILURE — could not stop the Kafka test broker (run dir $KAFKA_RUN_DIR)" >&2
      [ "$rc" -ne 0 ] || rc=1
    fi
    if [ "$rc" -eq 0 ]; then
      rm -rf "$KAFKA_RUN_DIR"
    else
      rm -rf "$KAFKA_RUN_DIR/data"
      echo "run-tests: Kafka broker log kept in $KAFKA_RUN_DIR/broker.log" >&2
    fi
  fi
  exit "$rc"
}

if [ -z "${DPBANDIT_TEST_KAFKA:-}" ]; then
  KAFKA_RUN_DIR=$(mktemp -d "${TMPDIR:-/tmp}/dpbandit-kafka.XXXXXX") || exit 1
  trap stop_kafka EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  # A free port pair unless DPBANDIT_KAFKA_PORT says otherwise, so that concurrent runs
  # (other checkouts on the same machine) do not collide.
  if ! bootstrap=$(DPBANDIT_KAFKA_RUN_DIR=$KAFKA_RUN_DIR \
    DPBANDIT_KAFKA_PORT=${DPBANDIT_KAFKA_PORT:-auto} DPBANDIT_KAFKA_PYTHON=$PY \
    scripts/kafka.sh start); then
    echo "run-tests: FAILURE — could not start the Kafka test broker (see the messages above)" >&2
    exit 1
  fi
  export DPBANDIT_TEST_KAFKA=$bootstrap DPBANDIT_KAFKA_RUN_DIR=$KAFKA_RUN_DIR DPBANDIT_KAFKA_PYTHON=$PY
  echo "run-tests: Kafka test broker at $DPBANDIT_TEST_KAFKA" >&2
else
  echo "run-tests: using the Kafka broker at DPBANDIT_TEST_KAFKA=$DPBANDIT_TEST_KAFKA" >&2
fi

# Two phases. The tests that need no broker (statistics, reproductions, doctests, the embedded
# service) are CPU-bound and independent: they run on DPBANDIT_TEST_WORKERS pytest-xdist workers
# (default: one per core, at most 2), each with single-threaded BLAS so that the workers do not
# oversubscribe the cores. The Kafka tests then run alone, one at a time, as before: several of
# them kill and restart services and measure delays that a busy machine would distort.
workers=${DPBANDIT_TEST_WORKERS:-$(nproc 2>/dev/null || echo 1)}
[ "$workers" -gt 2 ] 2>/dev/null && workers=2
phase() {  # phase NAME PYTEST-ARGS... ; sets rc_phase (5 = nothing selected)
  local name=$1
  shift
  echo "run-tests: $name" >&2
  "$PY" -m pytest "$@"
  rc_phase=$?
}
if [ "$workers" -gt 1 ] 2>/dev/null; then
  OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 \
    phase "tests without a broker on $workers workers" -m "not kafka" -n "$workers" "${@:2}"
else
  phase "tests without a broker" -m "not kafka" "${@:2}"
fi
rc_a=$rc_phase
phase "tests with the Kafka broker" -m kafka -p no:xdist "${@:2}"
rc_b=$rc_phase
if [ "$rc_a" -eq 5 ] && [ "$rc_b" -eq 5 ]; then
  echo "run-tests: FAILURE — pytest collected no tests (exit 5)" >&2
  exit 1
fi
for rc in "$rc_a" "$rc_b"; do
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then
    echo "run-tests: FAILURE — pytest exited with status $rc (no broker: $rc_a, Kafka: $rc_b)" >&2
    exit "$rc"
  fi
done
echo "run-tests: all tests passed"
