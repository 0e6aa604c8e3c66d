"""Control the real Apache Kafka broker of the integration tests.

The broker itself is run by ``scripts/kafka.sh`` (a single-node KRaft broker+controller on
127.0.0.1, see ``docs/kafka-tests.md``); this module drives that script from pytest:

* :meth:`KafkaBroker.for_session` attaches to the broker named by ``DPBANDIT_TEST_KAFKA``
  (``scripts/run-tests.sh`` starts one and exports it) or starts a private one;
* :meth:`KafkaBroker.restart` stops the broker and starts it again on the same data;
* :meth:`KafkaBroker.create_topic` creates a topic with N partitions and waits until every
  partition has a leader.

Nothing here skips: when the broker cannot be started or reached, :class:`KafkaBrokerError`
says why.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
KAFKA_SH = REPO / "scripts" / "kafka.sh"
ENV_BOOTSTRAP = "DPBANDIT_TEST_KAFKA"
ENV_RUN_DIR = "DPBANDIT_KAFKA_RUN_DIR"

log = logging.getLogger(__name__)


class KafkaBrokerError(RuntimeError):
    """The test broker could not be started, reached, restarted or stopped."""


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def parse_bootstrap(bootstrap: str) -> tuple[str, int]:
    """Split ``host:port``.

    >>> parse_bootstrap("127.0.0.1:29392")
    ('127.0.0.1', 29392)
    """
    m = re.fullmatch(r"\s*([^\s:,]+):(\d+)\s*", bootstrap)
    if not m:
        raise KafkaBrokerError(f"bootstrap address {bootstrap!r} is not of the form host:port")
    return m.group(1), int(m.group(2))


def unique_topic_name(prefix: str = "t") -> str:
    """A fresh, legal topic name (``[A-Za-z0-9._-]``, at most 249 characters).

    >>> name = unique_topic_name("test_x[param 1]")
    >>> name.startswith("test_x_param_1_-") and len(name) <= 249
    True
    """
    clean = re.sub(r"[^A-Za-z0-9._-]", "_", prefix)[:200]
    return f"{clean}-{uuid.uuid4().hex[:10]}"


def wait_until_ready(bootstrap: str, timeout_s: float = 30.0) -> dict:
    """Block until the broker answers a Metadata request listing a broker and a controller.

    Returns kafka-python's ``describe_cluster()`` dict; raises :class:`KafkaBrokerError`
    with the last error seen when the deadline passes.
    """
    from kafka import KafkaAdminClient

    config = {"bootstrap_servers": bootstrap, "request_timeout_ms": 5000}
    # kafka-python 3.x: bootstrap_timeout_ms (default 30 s per attempt); 2.x: api_version_auto_...
    for key in ("bootstrap_timeout_ms", "api_version_auto_timeout_ms"):
        if key in KafkaAdminClient.DEFAULT_CONFIG:
            config[key] = 3000
            break
    deadline = time.monotonic() + timeout_s
    last = "no attempt yet"
    while True:
        admin = None
        try:
            admin = KafkaAdminClient(**config)
            cluster = admin.describe_cluster()
            if cluster.get("brokers") and cluster.get("controller_id", -1) >= 0:
                return cluster
            last = f"metadata without brokers/controller: {cluster}"
        except Exception as exc:  # refused connection, timeout, broker still fenced, ...
            last = f"{type(exc).__name__}: {exc}"
        finally:
            if admin is not None:
                admin.close()
        if time.monotonic() >= deadline:
            raise KafkaBrokerError(
                f"Kafka broker at {bootstrap} not ready after {timeout_s:.0f}s (last: {last})"
            )
        time.sleep(0.25)


class KafkaBroker:
    """A broker run by ``scripts/kafka.sh`` (or any broker, for :attr:`bootstrap` only).

    ``env`` holds the ``DPBANDIT_KAFKA_*`` variables that identify the broker's run dir to
    the script, so :meth:`stop`, :meth:`start` and :meth:`restart` act on the same instance
    and the same data dir. ``managed`` brokers were started by this object and are stopped
    by :meth:`close`.
    """

    def __init__(self, bootstrap: str, env: dict[str, str], managed: bool):
        self.bootstrap = bootstrap
        self.env = env
        self.managed = managed

    # ------------------------------------------------------------------ construction

    @classmethod
    def for_session(cls, run_dir: Path) -> KafkaBroker:
        """The broker for a test session: ``$DPBANDIT_TEST_KAFKA`` if set, else a new one.

        A new broker gets free ports and keeps its state, log and data in ``run_dir``.
        """
        bootstrap = os.environ.get(ENV_BOOTSTRAP, "").strip()
        if bootstrap:
            return cls.attach(bootstrap)
        return cls.start_new(run_dir)

    @classmethod
    def attach(cls, bootstrap: str) -> KafkaBroker:
        """Use a running broker (normally started by ``scripts/kafka.sh start``)."""
        _, port = parse_bootstrap(bootstrap)
        env = {"DPBANDIT_KAFKA_PYTHON": sys.executable}
        if os.environ.get(ENV_RUN_DIR):
            env[ENV_RUN_DIR] = os.environ[ENV_RUN_DIR]
        else:  # started by hand with the default run dir for its port
            env["DPBANDIT_KAFKA_PORT"] = str(port)
        broker = cls(bootstrap, env, managed=False)
        try:
            wait_until_ready(bootstrap, timeout_s=30)
        except KafkaBrokerError as exc:
            raise KafkaBrokerError(
                f"{ENV_BOOTSTRAP}={bootstrap} is set but that broker does not answer: {exc}"
            ) from exc
        return broker

    @classmethod
    def start_new(cls, run_dir: Path, port: int | str = "auto") -> KafkaBroker:
        """Start a fresh broker with ``scripts/kafka.sh start`` (fetching the jars if needed)."""
        env = {
            "DPBANDIT_KAFKA_PYTHON": sys.executable,
            ENV_RUN_DIR: str(run_dir),
            "DPBANDIT_KAFKA_PORT": str(port),
        }
        broker = cls("", env, managed=True)
        out = broker._script("start", timeout_s=1200)  # first run also fetches the jars
        broker.bootstrap = out.strip().splitlines()[-1]
        parse_bootstrap(broker.bootstrap)
        return broker

    # ------------------------------------------------------------------ control

    def _run(self, command: str, timeout_s: float) -> subprocess.CompletedProcess:
        env = {**os.environ, **self.env}
        try:
            return subprocess.run(
                ["bash", str(KAFKA_SH), command],
                env=env,
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise KafkaBrokerError(
                f"scripts/kafka.sh {command} did not finish within {timeout_s:.0f}s:\n"
                f"{_tail(str(exc.stderr or ''))}"
            ) from exc

    def _script(self, command: str, timeout_s: float = 300) -> str:
        proc = self._run(command, timeout_s)
        if proc.returncode != 0:
            raise KafkaBrokerError(
                f"scripts/kafka.sh {command} failed (exit {proc.returncode}):\n{_tail(proc.stderr)}"
            )
        log.info("scripts/kafka.sh %s:\n%s", command, proc.stderr.strip())
        return proc.stdout

    @property
    def run_dir(self) -> Path | None:
        """The broker's run dir (state, pid, ``broker.log``, data), if known."""
        if ENV_RUN_DIR in self.env:
            return Path(self.env[ENV_RUN_DIR])
        if "DPBANDIT_KAFKA_PORT" in self.env:
            cache = os.environ.get("DPBANDIT_KAFKA_CACHE", str(REPO / ".cache" / "kafka"))
            return Path(cache) / "run" / self.env["DPBANDIT_KAFKA_PORT"]
        return None

    def _check_controllable(self) -> None:
        run_dir = self.run_dir
        state = run_dir / "state" if run_dir else None
        if state is None or not state.is_file():
            raise KafkaBrokerError(
                f"broker {self.bootstrap} was not started by scripts/kafka.sh "
                f"(no state file {state}); cannot stop/start/restart it"
            )
        port = re.search(r"^port=(\d+)$", state.read_text(), re.MULTILINE)
        if not port or int(port.group(1)) != parse_bootstrap(self.bootstrap)[1]:
            raise KafkaBrokerError(
                f"{state} describes a broker on port {port.group(1) if port else '?'}, "
                f"not {self.bootstrap}; cannot control it"
            )

    def stop(self) -> None:
        """Stop the broker (SIGTERM, then SIGKILL); its data stays."""
        self._check_controllable()
        self._script("stop")

    def is_running(self) -> bool:
        """Whether the broker process is up and answers clients (``scripts/kafka.sh status``)."""
        self._check_controllable()
        return self._run("status", timeout_s=60).returncode == 0

    def start(self) -> None:
        """Start a stopped broker again on its previous data (same ports, same cluster);
        a no-op when it is already running."""
        if not self.is_running():
            self._script("restart", timeout_s=300)  # stop is a no-op; start on the same data
        wait_until_ready(self.bootstrap, timeout_s=60)

    def restart(self) -> None:
        """Stop the broker and start it on the same data dir; returns once it accepts clients."""
        self._check_controllable()
        self._script("restart", timeout_s=300)
        wait_until_ready(self.bootstrap, timeout_s=60)

    def close(self) -> None:
        """Stop the broker if this object started it."""
        if self.managed:
            self._script("stop")

    @property
    def log_file(self) -> Path | None:
        return self.run_dir / "broker.log" if self.run_dir else None

    # ------------------------------------------------------------------ topics

    def admin(self, **config):
        """A ``KafkaAdminClient`` for this broker (close it when done)."""
        from kafka import KafkaAdminClient

        return KafkaAdminClient(bootstrap_servers=self.bootstrap, **config)

    def create_topic(
        self,
        name: str,
        partitions: int,
        *,
        replication_factor: int = 1,
        configs: dict[str, str] | None = None,
        timeout_s: float = 30.0,
    ) -> str:
        """Create ``name`` with ``partitions`` partitions; return once every partition has a
        leader. Raises (kafka-python's ``TopicAlreadyExistsError`` etc.) on failure."""
        import kafka

        spec = {"num_partitions": partitions, "replication_factor": replication_factor}
        if configs:
            spec["configs"] = dict(configs)
        admin = self.admin()
        try:
            if int(kafka.__version__.split(".")[0]) >= 3:
                admin.create_topics(
                    {name: spec}, timeout_ms=int(timeout_s * 1000), wait_for_metadata=True
                )
            else:  # kafka-python 2.x: NewTopic objects, and no wait_for_metadata
                from kafka.admin import NewTopic

                admin.create_topics(
                    [NewTopic(name, partitions, replication_factor, topic_configs=configs or {})],
                    timeout_ms=int(timeout_s * 1000),
                )
                self._wait_for_leaders(admin, name, partitions, timeout_s)
        finally:
            admin.close()
        return name

    @staticmethod
    def _wait_for_leaders(admin, name: str, partitions: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            meta = admin.describe_topics([name])
            parts = meta[0].get("partitions", []) if meta else []
            if len(parts) == partitions and all(p.get("leader", -1) >= 0 for p in parts):
                return
            if time.monotonic() >= deadline:
                raise KafkaBrokerError(f"topic {name} has no leader for every partition: {meta}")
            time.sleep(0.1)

    def __repr__(self) -> str:
        kind = "managed" if self.managed else "attached"
        return f"KafkaBroker({self.bootstrap!r}, {kind}, run_dir={self.run_dir})"
