#!/usr/bin/env bash
# Real single-node Apache Kafka (KRaft, broker+controller) for the integration tests.
#
#   scripts/kafka.sh fetch     download the broker jars with Maven into the cache
#   scripts/kafka.sh start     format a fresh KRaft data dir, start the broker, wait until ready
#   scripts/kafka.sh stop      SIGTERM (graceful), SIGKILL fallback, remove the pid file
#   scripts/kafka.sh restart   stop, then start again on the SAME data dir (data survives)
#   scripts/kafka.sh status    report whether the broker is running / ready
#   scripts/kafka.sh wait      block until the running broker accepts clients
#
# Environment (all optional):
#   DPBANDIT_KAFKA_VERSION          Kafka release (4.x) from Maven Central   [4.3.1]
#   DPBANDIT_KAFKA_CACHE            jar cache and run dirs                   [$REPO/.cache/kafka]
#   DPBANDIT_KAFKA_PORT             client listener port on 127.0.0.1, or "auto" to pick a
#                                   free pair below the ephemeral range      [29392]
#   DPBANDIT_KAFKA_CONTROLLER_PORT  KRaft controller listener port           [PORT+1]
#   DPBANDIT_KAFKA_RUN_DIR          one broker instance: state, pid, log, configs, data
#                                   [$CACHE/run/$PORT; required with PORT=auto]
#   DPBANDIT_KAFKA_DATA             KRaft data (log) dir       [$RUN_DIR/data, wiped by start]
#   DPBANDIT_KAFKA_PYTHON           python with kafka-python, for the readiness probe
#                                   [$REPO/.venv/bin/python, else python3]
#   DPBANDIT_KAFKA_START_TIMEOUT    seconds to wait for readiness            [90]
#   DPBANDIT_KAFKA_STOP_TIMEOUT     seconds to wait after SIGTERM before SIGKILL [30]
#   DPBANDIT_KAFKA_HEAP             JVM heap flags                           [-Xms256m -Xmx512m]
#   DPBANDIT_KAFKA_JVM_OPTS         other JVM flags      [-XX:TieredStopAtLevel=1 -XX:+UseG1GC ...]
#   DPBANDIT_KAFKA_EXTRA_PROPERTIES file appended to the generated server.properties
#
# A broker instance is identified by its run dir. start records the ports, version and data dir
# in $RUN_DIR/state; stop/restart/status/wait read them back from there.
# When ready, start/restart/wait print the bootstrap address (127.0.0.1:PORT) on stdout;
# every other message goes to stderr.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# 4.3.1 is the newest 4.x whose whole runtime closure is on Maven Central: 4.4.0's kafka_2.13
# pom is there but its kafka-tools-api dependency is not (404), so it cannot be resolved.
KAFKA_VERSION=${DPBANDIT_KAFKA_VERSION:-4.3.1}
REQUESTED_VERSION=$KAFKA_VERSION
SCALA_VERSION=2.13
# log4j2 backend (+ the slf4j 1.x binding Kafka 4.x logs through), same version Kafka 4.3.1 uses.
LOG4J_VERSION=${DPBANDIT_KAFKA_LOG4J_VERSION:-2.25.4}
CACHE=${DPBANDIT_KAFKA_CACHE:-$REPO/.cache/kafka}
PORT=${DPBANDIT_KAFKA_PORT:-29392}
CONTROLLER_PORT=${DPBANDIT_KAFKA_CONTROLLER_PORT:-}
HOST=127.0.0.1
START_TIMEOUT=${DPBANDIT_KAFKA_START_TIMEOUT:-90}
STOP_TIMEOUT=${DPBANDIT_KAFKA_STOP_TIMEOUT:-30}
HEAP=${DPBANDIT_KAFKA_HEAP:--Xms256m -Xmx512m}
# Small, short-lived test broker on a small shared machine: C1 only (faster start, less JIT
# CPU), G1 as in Kafka's own scripts.
JVM_OPTS=${DPBANDIT_KAFKA_JVM_OPTS:--XX:TieredStopAtLevel=1 -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:+ExitOnOutOfMemoryError}
DATA_DIR=""

if [ -n "${DPBANDIT_KAFKA_RUN_DIR:-}" ]; then
  RUN_DIR=$DPBANDIT_KAFKA_RUN_DIR
elif [ "$PORT" = auto ]; then
  RUN_DIR="" # checked by the commands: auto ports need an explicit run dir
else
  RUN_DIR=$CACHE/run/$PORT
fi
PID_FILE=$RUN_DIR/broker.pid
LOG_FILE=$RUN_DIR/broker.log
STATE_FILE=$RUN_DIR/state
PROPS=$RUN_DIR/server.properties
LOG4J_CONF=$RUN_DIR/log4j2.properties

# Paths that depend on the version/ports (re-derived after reading the state file).
derive() {
  DIST_DIR=$CACHE/kafka_$SCALA_VERSION-$KAFKA_VERSION
  LIBS=$DIST_DIR/libs
  STAMP=$DIST_DIR/.fetched
  BOOTSTRAP=$HOST:$PORT
}
derive

log() { echo "kafka.sh: $*" >&2; }
die() {
  echo "kafka.sh: ERROR: $*" >&2
  exit 1
}

usage() {
  sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# ---------------------------------------------------------------------------------------- fetch

diagnose_fetch_failure() {
  # Called after Maven failed: say *why* as precisely as we can.
  local mvn_log=$1 url code missing
  url="https://repo.maven.apache.org/maven2/org/apache/kafka/kafka_$SCALA_VERSION/$KAFKA_VERSION/kafka_$SCALA_VERSION-$KAFKA_VERSION.pom"
  if command -v curl >/dev/null 2>&1; then
    code=$(curl -s -o /dev/null -m 20 -w '%{http_code}' "$url" || true)
    case $code in
      200) ;;
      404) log "Kafka $KAFKA_VERSION (kafka_$SCALA_VERSION) does not exist on Maven Central ($url -> 404)." ;;
      000) log "Maven Central (repo.maven.apache.org) is unreachable from this machine." ;;
      *) log "Maven Central answered HTTP $code for $url" ;;
    esac
  fi
  missing=$(grep -oE "(Could not find artifact [^ ]+|[^ :]+:[^ :]+:[^ :]+:[^ :]+ was not found in)" "$mvn_log" |
    sed -E 's/^Could not find artifact //; s/ was not found in$//' | sort -u | paste -sd' ' || true)
  if [ -n "$missing" ]; then
    log "missing from the Maven repositories: $missing"
  elif grep -qiE 'UnknownHost|Connection refused|Network is unreachable|timed out|Could not transfer' "$mvn_log"; then
    log "Maven could not download from its repositories (network or proxy problem)."
  fi
  log "Maven said:"
  grep -E '^\[ERROR\] .+' "$mvn_log" | grep -vE 'Re-run Maven|full stack trace|For more information|\[Help 1\] http' |
    sort -u | head -n 5 >&2 || tail -n 15 "$mvn_log" >&2
}

write_pom() {
  # The test-only dependencies that kafka-server publishes with runtime scope (junit,
  # mockito, apacheds) are excluded: the broker never loads them.
  cat >"$1" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<!-- Generated by scripts/kafka.sh fetch: the runtime classpath of a Kafka broker. -->
<project xmlns="http://maven.apache.org/POM/4.0.0"
         xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
         xsi:schemaLocation="http://maven.apache.org/POM/4.0.0 https://maven.apache.org/xsd/maven-4.0.0.xsd">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.streaming-dpbandit</groupId>
  <artifactId>kafka-test-broker</artifactId>
  <version>$KAFKA_VERSION</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_$SCALA_VERSION</artifactId>
      <version>$KAFKA_VERSION</version>
      <exclusions>
        <exclusion><groupId>org.junit.jupiter</groupId><artifactId>*</artifactId></exclusion>
        <exclusion><groupId>org.junit.platform</groupId><artifactId>*</artifactId></exclusion>
        <exclusion><groupId>org.mockito</groupId><artifactId>*</artifactId></exclusion>
        <exclusion><groupId>org.apache.directory.api</groupId><artifactId>*</artifactId></exclusion>
        <exclusion><groupId>org.apache.directory.server</groupId><artifactId>*</artifactId></exclusion>
      </exclusions>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-api</artifactId>
      <version>$LOG4J_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-core</artifactId>
      <version>$LOG4J_VERSION</version>
    </dependency>
    <dependency>
      <!-- slf4j 1.7 -> log4j2 binding (Kafka 4.x uses slf4j-api 1.7.x) -->
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>$LOG4J_VERSION</version>
    </dependency>
  </dependencies>
</project>
EOF
}

fetch() {
  if [ -f "$STAMP" ]; then
    return 0
  fi
  [[ $KAFKA_VERSION =~ ^4\.[0-9]+\.[0-9]+$ ]] ||
    die "DPBANDIT_KAFKA_VERSION=$KAFKA_VERSION is not a Kafka 4.x release (expected 4.X.Y)"
  command -v mvn >/dev/null 2>&1 || die "Maven ('mvn') is not on PATH; it is needed to fetch the Kafka jars"
  mkdir -p "$CACHE"
  local lock=$CACHE/.fetch-$KAFKA_VERSION.lock
  exec 9>"$lock"
  if command -v flock >/dev/null 2>&1; then
    flock 9
  fi
  if [ -f "$STAMP" ]; then # fetched by a concurrent run while we waited for the lock
    exec 9>&-
    return 0
  fi
  local t0 tmp mvn_log
  t0=$(now)
  log "fetching Apache Kafka $KAFKA_VERSION (kafka_$SCALA_VERSION) + log4j2 $LOG4J_VERSION with Maven..."
  rm -rf "$DIST_DIR"
  mkdir -p "$DIST_DIR"
  tmp=$DIST_DIR/libs.partial
  mvn_log=$DIST_DIR/fetch.log
  write_pom "$DIST_DIR/pom.xml"
  # -U: re-check artifacts that an earlier (failed) attempt recorded as missing.
  if ! mvn -B -U -f "$DIST_DIR/pom.xml" dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$tmp" >"$mvn_log" 2>&1; then
    diagnose_fetch_failure "$mvn_log"
    die "fetching Kafka $KAFKA_VERSION with Maven failed (full log: $mvn_log)"
  fi
  local jar
  for jar in "kafka_$SCALA_VERSION-$KAFKA_VERSION.jar" "kafka-clients-$KAFKA_VERSION.jar" \
    "kafka-server-$KAFKA_VERSION.jar" "log4j-core-$LOG4J_VERSION.jar" \
    "log4j-slf4j-impl-$LOG4J_VERSION.jar"; do
    [ -f "$tmp/$jar" ] || die "Maven finished but $jar is missing from $tmp (see $mvn_log)"
  done
  mv "$tmp" "$LIBS"
  ls "$LIBS" >"$STAMP"
  exec 9>&-
  log "fetched $(wc -l <"$STAMP") jars into $LIBS in $(elapsed "$t0")s"
}

# ---------------------------------------------------------------------------------------- helpers

# Is $1 a live (non-zombie) Kafka JVM started for this run dir?
is_our_broker() {
  local pid=$1 state cmd
  [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || return 1
  state=$(sed -e 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1) || return 1
  [ "$state" != Z ] || return 1
  cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
  [[ $cmd == *kafka.Kafka* && $cmd == *"$PROPS"* ]]
}

running_pid() {
  local pid
  [ -f "$PID_FILE" ] || return 1
  pid=$(cat "$PID_FILE" 2>/dev/null || true)
  if is_our_broker "$pid"; then
    echo "$pid"
    return 0
  fi
  return 1
}

require_run_dir() {
  [ -n "$RUN_DIR" ] || die "DPBANDIT_KAFKA_PORT=auto needs DPBANDIT_KAFKA_RUN_DIR (where the chosen ports are recorded)"
}

state_get() { sed -n "s/^$1=//p" "$STATE_FILE" | tail -n 1; }

# Ports, version and data dir of the broker last started from $RUN_DIR (they override env).
load_state() {
  [ -f "$STATE_FILE" ] || return 1
  PORT=$(state_get port)
  CONTROLLER_PORT=$(state_get controller_port)
  KAFKA_VERSION=$(state_get version)
  DATA_DIR=$(state_get data_dir)
  [ -n "$PORT" ] && [ -n "$CONTROLLER_PORT" ] && [ -n "$KAFKA_VERSION" ] && [ -n "$DATA_DIR" ] ||
    die "broker state file $STATE_FILE is incomplete"
  derive
}

port_in_use() {
  # true if something already listens on 127.0.0.1:$1
  (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null
}

choose_ports() {
  # PORT=auto: a free pair (p, p+1) in 20000-32767, below Linux's ephemeral range, so that no
  # client's outgoing connection can grab the port while the broker is down during a restart.
  local p i
  if [ "$PORT" = auto ]; then
    for ((i = 0; i < 200; i++)); do
      p=$((20000 + (RANDOM % 6383) * 2))
      if ! port_in_use "$p" && ! port_in_use $((p + 1)); then
        PORT=$p
        break
      fi
    done
    [ "$PORT" != auto ] || die "could not find two free ports in 20000-32767"
    CONTROLLER_PORT=$((PORT + 1))
  fi
  [[ $PORT =~ ^[0-9]+$ ]] || die "DPBANDIT_KAFKA_PORT=$PORT is not a port number (or auto)"
  CONTROLLER_PORT=${CONTROLLER_PORT:-$((PORT + 1))}
  derive
}

probe_python() {
  local py
  if [ -n "${DPBANDIT_KAFKA_PYTHON:-}" ]; then
    py=$DPBANDIT_KAFKA_PYTHON
  elif [ -x "$REPO/.venv/bin/python" ]; then
    py=$REPO/.venv/bin/python
  else
    py=python3
  fi
  "$py" -c 'import kafka' >/dev/null 2>&1 ||
    die "the readiness probe needs kafka-python, but '$py' cannot import it (set DPBANDIT_KAFKA_PYTHON or run 'make setup')"
  echo "$py"
}

# Block until the broker answers a real Metadata request (and lists itself), or fail.
# Args: pid timeout_seconds
wait_ready() {
  local pid=$1 timeout=$2 rc=0
  [ -n "${PROBE_PY:-}" ] || die "internal error: wait_ready before probe_python"
  "$PROBE_PY" - "$BOOTSTRAP" "$pid" "$timeout" <<'PY' || rc=$?
import logging
import sys
import time

logging.disable(logging.CRITICAL)  # kafka-python warns on every refused connection

from kafka import KafkaAdminClient  # noqa: E402
from kafka.errors import KafkaConfigurationError  # noqa: E402

bootstrap, pid, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
deadline = time.monotonic() + timeout
kwargs = {
    "bootstrap_servers": bootstrap,
    "client_id": "dpbandit-kafka-probe",
    "request_timeout_ms": 5000,
    "reconnect_backoff_max_ms": 500,
}
# kafka-python 3.x calls the bootstrap timeout bootstrap_timeout_ms, 2.x api_version_auto_timeout_ms.
for key in ("bootstrap_timeout_ms", "api_version_auto_timeout_ms"):
    if key in KafkaAdminClient.DEFAULT_CONFIG:
        kwargs[key] = 3000
        break


def alive():
    if pid <= 0:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


last = "no attempt yet"
while time.monotonic() < deadline:
    if not alive():
        print(f"broker process {pid} exited before becoming ready", file=sys.stderr)
        sys.exit(3)
    admin = None
    try:
        admin = KafkaAdminClient(**kwargs)
        cluster = admin.describe_cluster()
        brokers = cluster.get("brokers") or []
        if brokers and cluster.get("controller_id", -1) >= 0:
            sys.exit(0)
        last = f"metadata without brokers/controller: {cluster}"
    except (KafkaConfigurationError, TypeError) as exc:  # a bug in this probe: do not retry
        print(f"readiness probe misconfigured: {exc}", file=sys.stderr)
        sys.exit(4)
    except Exception as exc:  # connection refused, timeouts, not-yet-unfenced broker, ...
        last = f"{type(exc).__name__}: {exc}"
    finally:
        if admin is not None:
            try:
                admin.close()
            except Exception:
                pass
    time.sleep(0.25)
print(f"broker at {bootstrap} not ready after {timeout:.0f}s (last probe: {last})", file=sys.stderr)
sys.exit(2)
PY
  return "$rc"
}

random_cluster_id() {
  # A Kafka cluster id is a base64url-encoded 16-byte UUID without padding (22 chars); Kafka's
  # own generator also avoids ids starting with '-' (they look like CLI flags).
  local id
  while :; do
    id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
    [[ $id == -* ]] || break
  done
  echo "$id"
}

java_cmd() {
  command -v java >/dev/null 2>&1 || die "java is not on PATH (Kafka $KAFKA_VERSION needs Java 17+)"
  # shellcheck disable=SC2206
  local heap=($HEAP) opts=($JVM_OPTS)
  JAVA_ARGS=(java "${heap[@]}" "${opts[@]}"
    -Djava.awt.headless=true -Dlog4j2.configurationFile="$LOG4J_CONF"
    -Dkafka.logs.dir="$RUN_DIR" -cp "$LIBS/*")
}

write_configs() {
  local data_dir=$1
  cat >"$PROPS" <<EOF
# Generated by scripts/kafka.sh: single-node KRaft broker+controller for tests.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@$HOST:$CONTROLLER_PORT
listeners=PLAINTEXT://$HOST:$PORT,CONTROLLER://$HOST:$CONTROLLER_PORT
advertised.listeners=PLAINTEXT://$HOST:$PORT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
log.dirs=$data_dir

# Topics: tests create theirs explicitly, with the partition count they need.
auto.create.topics.enable=${DPBANDIT_KAFKA_AUTO_CREATE_TOPICS:-false}
delete.topic.enable=true
num.partitions=2
default.replication.factor=1
min.insync.replicas=1

# Internal topics on a single node: replication factor 1, few partitions (fast to create).
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
share.coordinator.state.topic.num.partitions=1
group.initial.rebalance.delay.ms=0

# Both consumer-group protocols (classic, and KIP-848's consumer protocol, which clients choose
# with group.protocol=consumer; kafka.group_protocol in the service), as Kafka 4.x enables by
# default. Under the consumer protocol the session and heartbeat are the broker's: the tests'
# 10-s session and 2-s heartbeat, as the service's classic defaults (the broker's own minimum,
# 45 s, would make every kill -9 test wait 45 s for the dead member's partitions).
group.coordinator.rebalance.protocols=classic,consumer
group.consumer.min.session.timeout.ms=6000
group.consumer.session.timeout.ms=10000
group.consumer.min.heartbeat.interval.ms=1000
group.consumer.heartbeat.interval.ms=2000

# Small thread pools: the test machine is small and shared.
num.network.threads=2
num.io.threads=4
num.recovery.threads.per.data.dir=1
background.threads=4
# No time-based retention: the tests replay recorded streams stamped in the past (the record
# timestamps are the service's stream clock, docs/service.md), which a 7-day retention would
# delete at the broker's next retention check.
log.retention.ms=-1
log.segment.bytes=67108864
EOF
  if [ -n "${DPBANDIT_KAFKA_EXTRA_PROPERTIES:-}" ]; then
    [ -f "$DPBANDIT_KAFKA_EXTRA_PROPERTIES" ] ||
      die "DPBANDIT_KAFKA_EXTRA_PROPERTIES=$DPBANDIT_KAFKA_EXTRA_PROPERTIES does not exist"
    {
      echo
      echo "# From $DPBANDIT_KAFKA_EXTRA_PROPERTIES"
      cat "$DPBANDIT_KAFKA_EXTRA_PROPERTIES"
    } >>"$PROPS"
  fi
  cat >"$LOG4J_CONF" <<'EOF'
# Generated by scripts/kafka.sh: everything to stdout, which start redirects to broker.log.
status = warn
name = dpbandit-test-broker
# keep logging through the broker's own shutdown (it runs in a JVM shutdown hook)
shutdownHook = disable
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.netclient.name = org.apache.kafka.clients.NetworkClient
logger.netclient.level = WARN
# the full config dumps are thousands of lines; the effective server.properties is next to the log
logger.config.name = org.apache.kafka.common.config.AbstractConfig
logger.config.level = WARN
EOF
}

# ---------------------------------------------------------------------------------------- commands

# start fresh: format a new cluster (wiping the managed data dir) with the ports from the env.
# start keep:  the ports, version and data dir recorded in the state file (restart).
start() {
  local mode=$1 pid t0 cluster_id p i launcher
  require_run_dir
  if load_state && pid=$(running_pid); then
    PROBE_PY=$(probe_python)
    log "broker already running (pid $pid) on $BOOTSTRAP; waiting until it is ready"
    wait_ready "$pid" "$START_TIMEOUT" || die "the running broker (pid $pid) is not ready; see $LOG_FILE"
    echo "$BOOTSTRAP"
    return 0
  fi
  if [ "$mode" = keep ]; then
    load_state || die "no broker state in $STATE_FILE: nothing to restart (use start)"
    [ -f "$DATA_DIR/meta.properties" ] ||
      die "data dir $DATA_DIR of the previous broker is missing or unformatted; cannot restart on it"
  else
    PORT=${DPBANDIT_KAFKA_PORT:-29392}
    CONTROLLER_PORT=${DPBANDIT_KAFKA_CONTROLLER_PORT:-}
    KAFKA_VERSION=$REQUESTED_VERSION
    choose_ports
    DATA_DIR=${DPBANDIT_KAFKA_DATA:-$RUN_DIR/data}
  fi
  PROBE_PY=$(probe_python)
  fetch
  java_cmd
  mkdir -p "$RUN_DIR"
  rm -f "$PID_FILE"
  if [ "$mode" = fresh ] && [ -z "${DPBANDIT_KAFKA_DATA:-}" ]; then
    rm -rf "$DATA_DIR" # the managed data dir: every start is a fresh cluster
  fi
  for p in "$PORT" "$CONTROLLER_PORT"; do
    if port_in_use "$p"; then
      die "port $HOST:$p is already in use by another process (not a broker started from run dir $RUN_DIR); choose others with DPBANDIT_KAFKA_PORT / DPBANDIT_KAFKA_CONTROLLER_PORT (or PORT=auto)"
    fi
  done
  write_configs "$DATA_DIR"
  echo "==== $(date -Is) kafka.sh start ($mode): Kafka $KAFKA_VERSION on $BOOTSTRAP, data $DATA_DIR" >>"$LOG_FILE"
  t0=$(now)
  if [ -f "$DATA_DIR/meta.properties" ]; then
    log "reusing formatted data dir $DATA_DIR"
  else
    mkdir -p "$DATA_DIR"
    cluster_id=$(random_cluster_id)
    if ! "${JAVA_ARGS[@]}" kafka.tools.StorageTool format --cluster-id "$cluster_id" \
      --config "$PROPS" >>"$LOG_FILE" 2>&1; then
      grep -v $'^\tat ' "$LOG_FILE" | tail -n 20 >&2
      die "formatting KRaft storage in $DATA_DIR failed (log: $LOG_FILE)"
    fi
    log "formatted KRaft storage in $DATA_DIR (cluster id $cluster_id)"
  fi
  printf 'port=%s\ncontroller_port=%s\nversion=%s\ndata_dir=%s\n' \
    "$PORT" "$CONTROLLER_PORT" "$KAFKA_VERSION" "$DATA_DIR" >"$STATE_FILE"
  # A new session, so the terminal's Ctrl-C does not reach the broker (stop shuts it down).
  # The inner shell writes its own pid and execs java, so the pid file names the JVM itself.
  if command -v setsid >/dev/null 2>&1; then launcher=(setsid); else launcher=(); fi
  # shellcheck disable=SC2016 # $$ and $@ expand in the inner shell
  "${launcher[@]}" bash -c 'echo $$ >"$1"; shift; exec "$@"' _ "$PID_FILE" \
    "${JAVA_ARGS[@]}" kafka.Kafka "$PROPS" </dev/null >>"$LOG_FILE" 2>&1 &
  for ((i = 0; i < 100; i++)); do
    [ -s "$PID_FILE" ] && break
    sleep 0.05
  done
  pid=$(cat "$PID_FILE" 2>/dev/null || true)
  [ -n "$pid" ] || die "the broker JVM did not start (no pid file); see $LOG_FILE"
  log "broker starting (pid $pid), log $LOG_FILE"
  if ! wait_ready "$pid" "$START_TIMEOUT"; then
    log "last lines of $LOG_FILE:"
    grep -v $'^\tat ' "$LOG_FILE" | tail -n 40 >&2
    stop >/dev/null 2>&1 || true
    die "Kafka broker on $BOOTSTRAP did not become ready (see $LOG_FILE)"
  fi
  log "broker ready on $BOOTSTRAP after $(elapsed "$t0")s (pid $pid)"
  echo "$BOOTSTRAP"
}

stop() {
  local pid t0 i
  require_run_dir
  load_state || true
  if ! pid=$(running_pid); then
    if [ -f "$PID_FILE" ]; then
      log "removing stale pid file $PID_FILE (process $(cat "$PID_FILE" 2>/dev/null) is not running)"
      rm -f "$PID_FILE"
    else
      log "no broker running from $RUN_DIR"
    fi
    return 0
  fi
  t0=$(now)
  log "stopping broker on $BOOTSTRAP (pid $pid) with SIGTERM"
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < STOP_TIMEOUT * 10; i++)); do
    is_our_broker "$pid" || break
    sleep 0.1
  done
  if is_our_broker "$pid"; then
    log "broker (pid $pid) still alive after ${STOP_TIMEOUT}s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
      is_our_broker "$pid" || break
      sleep 0.1
    done
    if is_our_broker "$pid"; then
      die "broker (pid $pid) survived SIGKILL"
    fi
  fi
  rm -f "$PID_FILE"
  log "broker stopped in $(elapsed "$t0")s"
}

status() {
  local pid
  require_run_dir
  if ! load_state; then
    echo "not running: no broker was started from $RUN_DIR"
    return 3
  fi
  if pid=$(running_pid); then
    PROBE_PY=$(probe_python)
    if wait_ready "$pid" 5 2>/dev/null; then
      echo "running and ready: $BOOTSTRAP (pid $pid, Kafka $KAFKA_VERSION, data $DATA_DIR, log $LOG_FILE)"
      return 0
    fi
    echo "running but NOT ready: $BOOTSTRAP (pid $pid, log $LOG_FILE)"
    return 1
  fi
  echo "not running: $BOOTSTRAP (last data $DATA_DIR, log $LOG_FILE)"
  return 3
}

wait_cmd() {
  local pid
  require_run_dir
  load_state || die "no broker was started from $RUN_DIR (start it with: scripts/kafka.sh start)"
  pid=$(running_pid) || die "no broker running on $BOOTSTRAP (start it with: scripts/kafka.sh start)"
  PROBE_PY=$(probe_python)
  wait_ready "$pid" "$START_TIMEOUT" || die "broker (pid $pid) not ready; see $LOG_FILE"
  echo "$BOOTSTRAP"
}

case ${1:-} in
  fetch) fetch && log "jars for Kafka $KAFKA_VERSION in $LIBS" ;;
  start) start fresh ;;
  stop) stop ;;
  restart)
    stop
    start keep
    ;;
  status) status ;;
  wait) wait_cmd ;;
  *) usage ;;
esac
