"""The composition root: every service shape is assembled and run here from its settings.

``run_service`` picks the shape — the single service (:class:`~.service.Service` over Kafka,
a file or a simulation), the partitioned group (``scaling/group.py``), or a model broadcast's
learner or decision replica (``scaling/broadcast.py``, ``scaling/replica.py``) — and adds the
transport, the ``/metrics`` endpoint, the progress bar and the summary.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import Any, Protocol, TextIO

from ..metrics import ServiceMetrics
from ..probes import Readiness
from ..settings import KafkaSettings, ServiceSettings
from .errors import ServiceStartError
from .gc_tuning import service_gc
from .readiness import opened, service_readiness
from .service import Service
from .signals import StopSwitch
from .transport import InProcessTransport, Source, Transport

__all__ = [
    "build_transport",
    "kafka_transport",
    "run_broadcast",
    "run_service",
    "start_metrics_server",
]

log = logging.getLogger("streaming_dpbandit.service")


class Served(Protocol):
    """What :func:`run_service` runs: a :class:`Service`, or a group replica's service."""

    stop: StopSwitch

    def open(self) -> None: ...

    def install_signal_handlers(self) -> None: ...

    def run(self, progress: Callable[[Any], object] | None = None) -> dict[str, Any]: ...


def kafka_transport(kafka: KafkaSettings) -> Transport:
    """The Kafka transport over the client of ``kafka.client``: kafka-python's, or
    librdkafka's (the seam, ``kafka/seam.py``)."""
    from .kafka.seam import kafka_client

    return kafka_client(kafka.client).transport(kafka)


def build_transport(settings: ServiceSettings, keep_outputs: bool = False) -> Transport:
    """Kafka when configured; otherwise the in-process transport over a file or a simulation."""
    if settings.kafka is not None:
        return kafka_transport(settings.kafka)
    from ..settings import TopicsSettings

    t = TopicsSettings()
    if settings.file is not None:
        from .sim.sources import FileSource

        return InProcessTransport(
            FileSource(settings.file.path, (t.contexts, t.feedback)), keep_outputs
        )
    from ..envs import MATROID_REGISTRY, REGISTRY
    from .sim.sources import SimulatedSource

    sim = settings.simulation
    source: Source
    stream: dict[str, Any] = {
        "bandit_id": sim.bandit_id,
        "seed": sim.seed,
        "topics": (t.contexts, t.feedback),
    }
    timing: dict[str, Any] = {
        "dt": sim.seconds_between_events,
        "delay_mean": sim.feedback_delay_mean,
        "feedback_probability": sim.feedback_probability,
    }
    if sim.env in MATROID_REGISTRY:  # slate requests with per-item feedback
        from ..settings.embedded import slate_environment
        from .slates.sources import SlateSimulatedSource

        env = slate_environment(sim.env, sim.env_params)
        bandit = settings.bandits.get(sim.bandit_id)
        items = bandit.policy.params().get("item_ids") if bandit else None
        source = SlateSimulatedSource(env, sim.events, item_ids=items, **stream, **timing)
        return InProcessTransport(source, keep_outputs)
    env = REGISTRY[sim.env](**sim.env_params)
    local = settings.bandits.get(sim.bandit_id)
    if local is not None and local.privacy == "local":  # devices with the SDK send reports
        from .local.clients import SimulatedLDPClients

        ul = local.user_level  # user level: every simulated device bounds its own reports
        bound: dict[str, Any] = (
            {}
            if ul is None
            else {
                "max_reports_per_user": ul.max_contributions_per_user,
                "window_rounds": ul.window_rounds,
                "max_windows_per_user": ul.max_releases_per_user,
            }
        )
        source = SimulatedLDPClients(env, sim.events, models_topic=t.models, **bound, **stream)
    else:
        source = SimulatedSource(
            env, sim.events, feature_encoding=sim.feature_encoding, **stream, **timing
        )
    return InProcessTransport(source, keep_outputs)


def start_metrics_server(
    settings: ServiceSettings, metrics: ServiceMetrics, readiness: Readiness | None = None
) -> tuple[Any, int | None]:
    """Serve ``/metrics``, ``/livez`` and ``/readyz`` in a daemon thread; returns (server,
    bound port) or (None, None)."""
    if not settings.metrics.enabled:
        return None, None
    from ..probes import serve_http

    host, port = settings.metrics.host, settings.metrics.port
    try:
        server = serve_http(host, port, metrics.registry, readiness or Readiness())
    except OSError as err:  # port in use, address not available, permission denied
        raise ServiceStartError(
            f"cannot serve /metrics on {host}:{port} ({err.strerror or err}): choose another "
            "--metrics-port (or metrics.port; 0 picks a free one) or --no-metrics"
        ) from None
    return server, server.server_port


def serve_metrics(
    settings: ServiceSettings, readiness: Readiness | None = None
) -> tuple[ServiceMetrics, Any]:
    """Fresh collectors and their ``/metrics`` endpoint with the probes (announced), if
    enabled."""
    metrics = ServiceMetrics()
    server, port = start_metrics_server(settings, metrics, readiness)
    if port:
        url = f"http://{settings.metrics.host}:{port}/metrics"
        until = "" if settings.kafka else " while the run lasts (--linger SECONDS: longer)"
        log.info("metrics: %s (probes: /livez, /readyz)%s", url, until, extra={"url": url})
    return metrics, server


def run_service(
    settings: ServiceSettings,
    transport: Transport | None = None,
    out: TextIO | None = None,
    linger_s: float = 0.0,
) -> dict[str, Any]:
    """Run until the input ends or SIGTERM/SIGINT; print and return the summary.

    ``linger_s``: after a finite input ends, keep serving ``/metrics`` this many seconds (or
    until SIGTERM/SIGINT), so a scraper such as Prometheus records the final values.
    """
    out = sys.stdout if out is None else out
    if settings.broadcast is not None:  # model broadcast: learner or decision replica
        return run_broadcast(settings, out)
    group = settings.scaling.mode == "group" and transport is None
    transport = None if group else (transport or build_transport(settings))
    readiness = service_readiness(settings)
    metrics, server = serve_metrics(settings, readiness)
    try:
        return _run(settings, transport, metrics, server, out, linger_s, group, readiness)
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()


def run_broadcast(settings: ServiceSettings, out: TextIO | None = None) -> dict[str, Any]:
    """Run this process's role of a model broadcast until SIGTERM/SIGINT."""
    import json

    from .scaling.broadcast import check_broadcast, ensure_broadcast_topics, learner_kafka_settings
    from .scaling.broadcast import learner_service as learner_of
    from .scaling.replica import DecisionReplica

    out = sys.stdout if out is None else out
    check_broadcast(settings)
    readiness = service_readiness(settings)
    metrics, server = serve_metrics(settings, readiness)
    try:
        if settings.broadcast_section().role == "decider":
            replica = DecisionReplica(settings, metrics)
            replica.open()
            replica.install_signal_handlers()
            with service_gc():
                summary = replica.run(opened(readiness, replica))
            readiness.stopped("stopped")
            print(json.dumps(summary), file=out)
            return summary
        try:
            ensure_broadcast_topics(settings)
        except Exception as err:
            raise ServiceStartError(f"cannot create topics: {type(err).__name__}: {err}") from None
        learner = learner_of(settings, kafka_transport(learner_kafka_settings(settings)), metrics)
        learner.open()
        learner.install_signal_handlers()
        with service_gc():
            summary = learner.run(opened(readiness, learner))
        readiness.stopped("stopped")
        summary["role"] = "learner"
        summary["state_directory"] = str(settings.snapshots.directory)
        print_summary(summary, out)
        return summary
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()


def _run(
    settings: ServiceSettings,
    transport: Transport | None,
    metrics: ServiceMetrics,
    server: Any,
    out: TextIO,
    linger_s: float,
    group: bool,
    readiness: Readiness,
) -> dict[str, Any]:
    service: Served
    if group:
        from .scaling.group import GroupService

        service = GroupService(settings, metrics)
    else:
        assert transport is not None  # run_service builds one unless in group mode
        service = Service(settings, transport, metrics)
    service.open()
    service.install_signal_handlers()
    turned = opened(readiness, service)
    model_server = None
    local = getattr(service, "local", None)
    if local and settings.model_server.enabled:  # local models
        from .local.publisher import start_model_server

        model_server, mport = start_model_server(
            settings.model_server.host, settings.model_server.port, local.store
        )
        url = f"http://{settings.model_server.host}:{mport}/v1/models"
        log.info("models: %s", url, extra={"url": url})
    bar = None
    total = None
    if isinstance(transport, InProcessTransport) and settings.file is None:
        total = settings.simulation.events
    if settings.progress:
        from tqdm import tqdm

        bar = tqdm(
            total=total,
            unit="event",
            unit_scale=True,
            file=sys.stderr,
            leave=False,
            desc="serving",
            dynamic_ncols=True,
        )
    seen = [0]
    from .sim.sources import SimulatedSource

    simulated = getattr(transport, "source", None)
    if not isinstance(simulated, SimulatedSource):
        simulated = None

    def progress(svc: Any) -> None:  # a Service or a GroupService
        turned(svc)
        if simulated is not None:  # the stream knows the true mean rewards
            metrics.simulated_regret.labels(simulated.bandit_id).set(simulated.regret)
        if bar is None:
            return
        local = getattr(svc, "local", None)
        done = sum(rt.stats["decided"] for rt in svc.bandits.values()) + sum(
            rt.server.reports for rt in (local.runtimes.values() if local else ())
        )
        if done > seen[0]:
            bar.update(done - seen[0])
            seen[0] = done

    try:
        with service_gc():  # started: what exists now lives as long as the process
            summary = service.run(progress)
    finally:
        readiness.stopped("stopping" if service.stop.requested else "input finished")
        if bar is not None:
            bar.close()
        if model_server is not None:
            model_server.shutdown()
    if simulated is not None:
        metrics.simulated_regret.labels(simulated.bandit_id).set(simulated.regret)
    source = getattr(transport, "source", None)
    if source is not None and hasattr(source, "summary"):
        summary["source"] = source.summary()
    if isinstance(transport, InProcessTransport):  # a finite input: what this run read of it
        summary["records_read"] = transport.consumed()
    if group:
        summary["state_topic"] = getattr(service, "state_topic", None)
    else:
        summary["state_directory"] = str(settings.snapshots.directory)
    print_summary(summary, out)
    out.flush()
    if linger_s > 0 and server is not None and not service.stop.requested:
        log.info("input finished; serving /metrics for %g s more (SIGTERM/SIGINT stops)", linger_s)
        deadline = time.monotonic() + linger_s
        while not service.stop.requested and time.monotonic() < deadline:
            time.sleep(0.1)
    return summary


def print_summary(summary: dict[str, Any], out: TextIO) -> None:
    from ..privacy.accountant import format_of_record
    from ..utils.tables import format_table

    rows = []
    for name, b in summary["bandits"].items():
        st = b["stats"]
        pr = b["privacy"] or {}
        rec = pr.get("of_record")
        rows.append(
            [
                name,
                b["policy"],
                f"{b['rounds']:,}",
                str(b["model_version"]),
                f"{st.get('joined', 0):,}",
                f"{st.get('expired', 0) + st.get('expired_forced', 0):,}",
                "-" if b["mean_reward_window"] is None else f"{b['mean_reward_window']:.3f}",
                "-" if not pr else f"{pr.get('releases', 0)}",
                "-" if rec is None else format_of_record(rec, 3),
            ]
        )
    where = summary.get("state_directory") or summary.get("state_topic")
    local = summary.get("local_bandits", {})
    if local and not summary["bandits"]:
        n = sum(b["reports_absorbed"] for b in local.values())
        el = summary["elapsed_s"]
        print(
            f"absorbed {n:,} LDP reports in {el:.1f} s ({n / el if el > 0 else 0:,.0f} "
            f"reports/s); state in {where}",
            file=out,
        )
    else:
        n, total = summary["decisions"], summary.get("decisions_total", summary["decisions"])
        before = (
            ""
            if total == n
            else f"; the state holds {total - n:,} decisions of earlier runs, {total:,} in all "
            "(the table counts them all)"
        )
        print(
            f"served {n:,} {'new ' if before else ''}decisions in {summary['elapsed_s']:.1f} s "
            f"({_rate(summary['events_per_s'])} events/s){before}; state in {where}",
            file=out,
        )
    if summary["bandits"] or not local:
        print(
            format_table(
                [
                    "bandit",
                    "policy",
                    "rounds",
                    "model",
                    "rewards joined",
                    "expired",
                    "mean reward (last 1000)",
                    "releases",
                    "privacy spent",
                ],
                rows,
            ),
            file=out,
        )
    for name, b in summary["bandits"].items():
        ul = b.get("user_level")
        if ul:  # the guarantee of record is per user (docs/privacy/user-level.md)
            print(
                f"bandit {name}: {ul['statement'] or 'per user: no release yet'}; "
                f"{ul['admitted']:,} events learned, {ul['bounded']:,} beyond the bound",
                file=out,
            )
    for name, b in summary.get("local_bandits", {}).items():
        pr = b["privacy"]
        print(
            f"local bandit {name}: ldp-glb {b['variant']}/{b['setting']}, model "
            f"{b['model_id']} version {b['model_version']} ({b['phase']} phase), "
            f"{b['reports_absorbed']:,} reports absorbed; every report "
            f"(ε={pr['epsilon_per_report']:g}, δ={pr['delta_per_report']:g})-LDP "
            f"({pr['calibration']})",
            file=out,
        )
        if pr.get("user_level"):  # docs/privacy/user-level-ldp.md
            print(f"local bandit {name}: {pr['user_level']['statement']}", file=out)
    if summary["dead_letters"]:
        dl = ", ".join(f"{k}: {v}" for k, v in sorted(summary["dead_letters"].items()))
        print(f"dead letters: {dl}", file=out)
    waiting = [
        f"{name}: {w['decisions_awaiting_feedback']:,} decisions await feedback, "
        f"{w['feedback_awaiting_its_event']:,} feedback messages await their event"
        for name, b in summary["bandits"].items()
        if (w := b.get("waiting")) and any(w.values())
    ]
    if waiting:  # not lost: joined by later records, or expired when the clock passes them
        print(f"waiting in the state (docs/service.md): {'; '.join(waiting)}", file=out)
    src = summary.get("source")
    if src and "uniform_pseudo_regret" in src:
        print_comparison(summary, out)
    elif src and "pseudo_regret" in src:
        bounded = src.get("bounded")
        print(
            f"simulated stream: {src['decisions']:,} decisions, pseudo-regret "
            f"{src['pseudo_regret']:,.1f}, mean reward {src['mean_reward']:.3f}"
            + ("" if bounded is None else f", {bounded:,} not reported (user-level bound)"),
            file=out,
        )


def _rate(x: float) -> str:
    """A rate for the summary line: whole numbers, two digits below 10.

    >>> _rate(3618.4), _rate(0.44), _rate(0.0)
    ('3,618', '0.44', '0')
    """
    return f"{x:,.0f}" if x >= 10 or x == 0 else f"{x:.2g}"


def print_comparison(summary: dict[str, Any], out: TextIO) -> None:
    """The policy next to the uniform random policy and the oracle, on the same simulated stream.

    Regret is pseudo-regret, Σ_t (best arm's mean reward − chosen arm's mean reward); the
    uniform policy's figures are its expectation given the stream's contexts (no coin flips).
    """
    from ..utils.tables import format_table

    src = summary["source"]
    names = [f"{b['policy']} ({name})" for name, b in summary["bandits"].items()] or ["service"]
    label = names[0] if len(names) == 1 else "the service's bandits"
    uni = src["uniform_pseudo_regret"]
    rows = [
        [
            f"{label}, this run",
            f"{src['pseudo_regret']:,.1f}",
            f"{src['mean_expected_reward']:.3f}",
            f"{src['mean_reward']:.3f}",
        ],
        [
            "uniform random arm (expected)",
            f"{uni:,.1f}",
            f"{src['uniform_mean_expected_reward']:.3f}",
            "-",
        ],
        ["oracle: best arm every time", "0.0", f"{src['oracle_mean_expected_reward']:.3f}", "-"],
    ]
    print(
        f"\nthe same simulated stream ({src['decisions']:,} decisions, seed {src.get('seed')}) "
        "under three policies:",
        file=out,
    )
    print(
        format_table(
            ["policy", "regret", "mean reward, whole stream", "observed (with noise)"], rows
        ),
        file=out,
    )
    ratio = src["pseudo_regret"] / uni if uni > 0 else float("nan")
    print(
        f"the policy's regret is {ratio:.2f}× the uniform policy's on this stream.\n"
        "regret (pseudo-regret): Σ over decisions of (best arm's mean reward − "
        "chosen arm's mean reward).\n"
        "mean reward, whole stream: the chosen arm's true mean reward, averaged over every "
        "decision;\n  observed: the rewards actually drawn (with noise), averaged likewise;\n"
        "  'mean reward (last 1000)' in the first table: the last 1,000 rewards the service "
        "joined (observed).",
        file=out,
    )
