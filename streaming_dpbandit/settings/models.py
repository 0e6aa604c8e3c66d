"""The settings of ``dpbandit serve`` (pydantic-settings): Kafka, scaling, sources, bandits.

Sources, highest priority first: command-line overrides, ``DPBANDIT_...`` environment
variables, the YAML file, defaults (:func:`~.loading.load_service_settings`). A bandit's
``policy`` is a :data:`~streaming_dpbandit.config.PolicyField`: any registered policy's
configuration.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from ..config import PolicyField, UserLevelConfig, validate_for_mode
from ..policies import is_slate

#: The YAML file :func:`~.loading.load_service_settings` is reading (``{"path": ...}``), for
#: :meth:`ServiceSettings.settings_customise_sources`.
YAML_FILE: dict = {}


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True, allow_inf_nan=False)


class TopicsSettings(_Section):
    contexts: str = "dpbandit.contexts"
    feedback: str = "dpbandit.feedback"
    decisions: str = "dpbandit.decisions"
    dead_letter: str = "dpbandit.dead-letter"
    models: str = Field(
        "dpbandit.models",
        description="compacted topic of the published models of privacy=local bandits",
    )


class KafkaSettings(_Section):
    """Kafka transport (kafka-python, or librdkafka through confluent-kafka). Absent: the
    embedded in-process transport is used."""

    bootstrap_servers: str = Field(min_length=1)
    client: Literal["kafka-python", "confluent-kafka"] = Field(
        "kafka-python",
        description="the Kafka client of the service's consumers and producers: kafka-python, "
        "or librdkafka through confluent-kafka (pip install 'streaming_dpbandit[confluent]'); "
        "every scaling mode and the model broadcast run on both (docs/service.md, Kafka "
        "clients)",
    )
    group_protocol: Literal["classic", "consumer"] = Field(
        "classic",
        description="the consumer-group protocol: classic (JoinGroup/SyncGroup; a rebalance "
        "revokes every partition), or consumer (KIP-848, Kafka >= 4.0: the broker assigns and "
        "partitions move one by one; the session and heartbeat are the broker's "
        "group.consumer.* settings); consumer needs client confluent-kafka",
    )
    group_id: str = "dpbandit"
    client_id: str = "dpbandit"
    topics: TopicsSettings = Field(default_factory=TopicsSettings)
    create_topics: bool = True
    partitions: int = Field(6, ge=1)
    replication_factor: int = Field(1, ge=1)
    max_poll_records: int = Field(2000, ge=1)
    poll_timeout_ms: int = Field(50, ge=0)
    linger_ms: int = Field(2, ge=0)
    producer_batch_bytes: int = Field(
        1 << 20,
        ge=1024,
        le=4 << 20,
        description="the producer's batch size per partition (kafka-python's batch_size). "
        "kafka-python wakes its sender thread at every send while more than one batch of a "
        "partition waits, so batches that fit a whole decided chunk save a system call and a "
        "thread switch per decision (docs/service.md, Performance)",
    )
    rejoin_stall_s: float = Field(
        60.0,
        ge=0,
        description="re-create the consumer when its group membership has not been stable for "
        "this long (kafka-python 3.0 can stall in a re-join for ever); 0 disables; "
        "client kafka-python only (librdkafka re-joins by itself)",
    )
    session_timeout_ms: int = Field(
        10_000,
        ge=1000,
        description="consumer-group session: how long the broker waits for a member that "
        "stopped heartbeating (a killed process) before its partitions move or a newcomer may "
        "take them; the broker accepts 6,000-300,000 by default (kafka-python's default, "
        "45,000, made a restart after kill -9 wait ~45 s)",
    )
    heartbeat_interval_ms: int | None = Field(
        None,
        ge=100,
        description="consumer heartbeats; default a fifth of session_timeout_ms (at least 300)",
    )
    static_membership: bool = Field(
        True,
        description="scaling.mode single: join the consumer group as a static member "
        "(group.instance.id = group_instance_id, or <group_id>-single), so a restarted "
        "process takes its partitions back at once, without waiting for the session timeout "
        "of the one it replaces (docs/operations.md, Restarts)",
    )
    group_instance_id: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9._-]{1,249}$",
        description="static membership id (KIP-345): in single mode default <group_id>-single; "
        "in group mode none unless set (then unique per replica, e.g. the pod name)",
    )
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_cafile: str | None = None

    @model_validator(mode="after")
    def _client_installed(self):
        if self.client == "confluent-kafka":
            import importlib.util

            if importlib.util.find_spec("confluent_kafka") is None:
                raise ValueError(
                    "client 'confluent-kafka' needs the confluent-kafka package: pip install "
                    "'streaming_dpbandit[confluent]' (or choose client: kafka-python)"
                )
        return self

    @model_validator(mode="after")
    def _options_of_the_client(self):
        """An option the chosen client (or group protocol) does not have is an error, never
        silently ignored."""
        # (a value other than the default: settings re-validated from a dump set every field)
        fields = type(self).model_fields
        given = {n for n in self.model_fields_set if getattr(self, n) != fields[n].default}
        if self.group_protocol == "consumer" and self.client != "confluent-kafka":
            raise ValueError(
                f"kafka.group_protocol 'consumer' (KIP-848) needs kafka.client "
                f"'confluent-kafka': {self.client} speaks the classic protocol only"
            )
        if self.client == "confluent-kafka" and "rejoin_stall_s" in given:
            raise ValueError(
                "kafka.rejoin_stall_s is kafka-python's re-join stall watchdog; librdkafka "
                "re-joins by itself: remove it with client 'confluent-kafka'"
            )
        broker_side = sorted({"session_timeout_ms", "heartbeat_interval_ms"} & given)
        if self.group_protocol == "consumer" and broker_side:
            raise ValueError(
                f"kafka.{broker_side[0]} is the broker's under group_protocol 'consumer' "
                "(KIP-848: group.consumer.session.timeout.ms, "
                "group.consumer.heartbeat.interval.ms): remove it"
            )
        return self

    @model_validator(mode="after")
    def _heartbeat_below_session(self):
        if self.heartbeat_interval_ms is not None and (
            self.heartbeat_interval_ms >= self.session_timeout_ms
        ):
            raise ValueError(
                f"heartbeat_interval_ms ({self.heartbeat_interval_ms}) must be below "
                f"session_timeout_ms ({self.session_timeout_ms})"
            )
        return self

    def heartbeat_ms(self) -> int:
        """The consumer's heartbeat interval: the setting, else a fifth of the session.

        >>> KafkaSettings(bootstrap_servers="h:1", session_timeout_ms=6000).heartbeat_ms()
        1200
        """
        if self.heartbeat_interval_ms is not None:
            return self.heartbeat_interval_ms
        return max(300, self.session_timeout_ms // 5)

    def instance_id(self, single: bool) -> str | None:
        """The consumer's ``group.instance.id`` (None: a dynamic member).

        >>> KafkaSettings(bootstrap_servers="h:1", group_id="shop/eu").instance_id(single=True)
        'shop_eu-single'
        >>> KafkaSettings(bootstrap_servers="h:1").instance_id(single=False) is None
        True
        """
        if self.group_instance_id is not None:
            return self.group_instance_id
        if not single or not self.static_membership:
            return None
        return re.sub(r"[^A-Za-z0-9._-]", "_", self.group_id)[:240] + "-single"


class ScalingSettings(_Section):
    """Several replicas in one consumer group (docs/scaling.md, pattern 1).

    ``single`` (default): one process owns every partition; snapshots and the ledger live in
    the local state directory. ``group``: each input partition index is a *task* with its own
    Kafka transactional producer; task snapshots go to a compacted changelog topic and ledger
    records to a compacted ledger topic, committed atomically with the task's outputs.
    """

    mode: Literal["single", "group"] = "single"
    state_topic: str | None = Field(None, description="default: <group_id>.state")
    ledger_topic: str | None = Field(None, description="default: <group_id>.ledger")
    commit_interval_s: float = Field(
        1.0, gt=0, description="transaction commit interval: bounds the decisions' visibility"
    )
    transaction_timeout_ms: int = Field(60_000, ge=1000)

    @model_validator(mode="before")
    @classmethod
    def _moved(cls, data):
        if isinstance(data, dict) and "session_timeout_ms" in data:
            raise ValueError(
                "scaling.session_timeout_ms moved to kafka.session_timeout_ms (one setting for "
                "both scaling modes)"
            )
        return data


class SimulationSource(_Section):
    """The embedded default input: a simulated stream from an ``envs/`` environment."""

    env: str = "fliphat-paper"
    env_params: dict = Field(default_factory=lambda: {"d": 100, "K": 3, "s_star": 5})
    events: int = Field(20_000, ge=1)
    bandit_id: str = "default"
    seconds_between_events: float = Field(0.01, gt=0)
    feedback_delay_mean: float = Field(0.2, ge=0)
    feedback_probability: float = Field(1.0, ge=0, le=1)
    seed: int = 0
    feature_encoding: Literal["json", "f64", "raw-f64", "raw-f32"] = Field(
        "json",
        description="how contexts carry features: JSON number lists, binary "
        "arm_features_f64 (base64 float64 inside the JSON), or the whole context in the "
        "compact binary form with raw float64 or float32 features (docs/events.md)",
    )


class FileSource(_Section):
    """A JSONL file of ``{"topic": "contexts"|"feedback", "value": {...}}`` lines."""

    path: Path


class LocalBanditSettings(_Section):
    """Server side of a ``privacy: local`` bandit (LDP-GLB spec §8; ``stream/local.py``).

    Model versions are published every ``refresh_every`` reports (the ldp-glb policy setting).
    """

    max_staleness: int = Field(
        100, ge=0, description="reports computed against an older model version are dropped"
    )
    dedup_window: int = Field(
        100_000, ge=1, description="a msg_id seen within the last N accepted reports is dropped"
    )
    model_epoch: int = Field(
        0, ge=0, description="bump to start a new model lineage (a new model id) on purpose"
    )


class FeaturesSettings(_Section):
    """The featuriser of JSON feature objects (docs/features.md): VW-style feature hashing
    into the bandit's dimension, shared by the gateway, the service and replay."""

    dimension: int | None = Field(
        None, ge=1, description="the hashed dimension; must equal the policy's d (default: it)"
    )
    namespaces: list[str] | None = Field(
        None,
        description="namespaces kept (context and action are the default ones); default: all",
    )
    interactions: list[tuple[str, str]] = Field(
        default_factory=lambda: [("*", "*")],
        description="(context namespace, action namespace) pairs crossed; * matches any",
    )
    seed: int = Field(0, ge=0, lt=1 << 32, description="seed of the namespace hashes")
    max_features: int = Field(10_000, ge=1, description="features of one request, at most")

    def build(self, d: int):
        """The :class:`~streaming_dpbandit.features.FeatureHasher` of these settings."""
        from ..features import FeatureHasher

        return FeatureHasher(
            d,
            namespaces=self.namespaces,
            interactions=self.interactions,
            seed=self.seed,
            max_features=self.max_features,
        )


class BanditSettings(_Section):
    """One bandit: its policy and how its rewards are joined."""

    policy: PolicyField
    privacy: Literal["central", "local"] = Field(
        "central",
        description="local: devices privatise their own reports (policy ldp-glb); the feedback "
        "topic carries LDP reports and the service publishes model snapshots",
    )
    local: LocalBanditSettings = Field(default_factory=LocalBanditSettings)
    feedback_window: float = Field(60.0, gt=0, description="seconds of event time")
    on_expiry: Literal["drop", "default"] = "drop"
    default_reward: float = 0.0
    reward_bounds: tuple[float, float] | None = None
    max_pending: int = Field(200_000, ge=1)
    feedback_lag_rounds: int = Field(
        0,
        ge=0,
        description="for policies that update every few rounds (LinUCB family): an update at "
        "round r reads the rows of rounds ≤ r − lag, so rewards can arrive without blocking",
    )
    retention: float | None = Field(None, gt=0, description="seconds; default 10× the window")
    epsilon_budget: float | None = Field(None, gt=0)
    arms: list[str] | None = Field(
        None, description="arm catalogue for shared contexts (disjoint per-arm encoding)"
    )
    seed: int | None = Field(
        None, description="seeds noise key and coins: reproducible tests only, never production"
    )
    user_level: UserLevelConfig | None = Field(
        None,
        description="user-level privacy: at most k events of one user per release, at most E "
        "releases per user; the policy's epsilon/delta are then one release's guarantee for "
        "the k events of one user (docs/privacy/user-level.md). Absent: event level",
    )
    features: FeaturesSettings | None = Field(
        None,
        description="featuriser of JSON feature objects (the gateway's requests; "
        "docs/features.md): feature hashing into the policy's d",
    )

    def featuriser(self):
        """The bandit's :class:`~streaming_dpbandit.features.FeatureHasher`: its ``features``
        section (the defaults without one) into the policy's d — the one featuriser of feature
        objects for the gateway, the service's contexts and replay (docs/features.md)."""
        return (self.features or FeaturesSettings()).build(int(getattr(self.policy, "d", 0)))

    def fingerprint(self) -> str:
        """What a snapshot records of this bandit's configuration: its policy configuration
        (and its user-level bound and featuriser, when it has them; not its key file's path:
        the key itself is in the snapshot)."""
        if self.user_level is None and self.features is None:
            return str(self.policy.model_dump_json())
        policy = json.loads(self.policy.model_dump_json())
        if self.user_level is not None:
            policy["user_level"] = self.user_level.model_dump(exclude={"key_file"})
        if self.features is not None:  # the learned coefficients live in its hashed space
            policy["features"] = self.features.model_dump(mode="json")
        return json.dumps(policy)

    def changes_since(self, fingerprint: str) -> list[str]:
        """What changed since a snapshot's :meth:`fingerprint` (a new or dropped user-level
        bound or featuriser, or a changed one, counts as ``user_level`` or ``features``)."""
        then = json.loads(fingerprint)
        bound = then.pop("user_level", None)
        feats = then.pop("features", None)
        changed: list[str] = list(self.policy.changes_since(json.dumps(then)))
        now = None if self.user_level is None else self.user_level.model_dump(exclude={"key_file"})
        now_f = None if self.features is None else self.features.model_dump(mode="json")
        return (
            changed
            + (["user_level"] if bound != now else [])
            + (["features"] if feats != now_f else [])
        )

    @model_validator(mode="after")
    def _features_fit_the_policy(self):
        f = self.features
        d = getattr(self.policy, "d", None)
        if f is not None and f.dimension is not None and f.dimension != d:
            raise ValueError(
                f"features.dimension {f.dimension} differs from the policy's d = {d}: feature "
                "hashing maps into the policy's dimension"
            )
        return self

    @model_validator(mode="after")
    def _user_level_applies(self):
        if self.user_level is not None:
            why = self.user_level.refusal(self.policy)
            if why is not None:
                raise ValueError(why)
        return self


class SnapshotSettings(_Section):
    directory: Path = Path("state")
    interval_s: float = Field(30.0, gt=0)


class MetricsSettings(_Section):
    """The HTTP port of ``/metrics`` and of the probes ``/livez`` and ``/readyz``."""

    enabled: bool = True
    host: str = "127.0.0.1"
    port: int = Field(9464, ge=0, le=65535)
    broker_timeout_s: float = Field(
        30.0,
        gt=0,
        description="/readyz answers 503 once the Kafka bootstrap servers have been "
        "unreachable this long",
    )
    stall_timeout_s: float = Field(
        300.0,
        gt=0,
        description="/livez answers 503 once the service loop has not turned this long (a "
        "private release in progress counts as not turning: leave room for the longest)",
    )


class BroadcastSettings(_Section):
    """Model broadcast (docs/scaling.md, pattern 2): this process is the bandit's single
    ``learner`` or one of its decision replicas (``decider``)."""

    role: Literal["learner", "decider"]
    models_topic: str = Field("dpbandit.models", min_length=1)
    learner_group_id: str | None = Field(
        None, description="consumer group of the learner (default: '<kafka.group_id>.learner')"
    )
    replica_id: str | None = Field(
        None, max_length=200, description="decider's name in its decisions (default host-pid)"
    )
    model_refresh_ms: int = Field(100, ge=0, description="decider: how often it checks models")
    commit_interval_s: float = Field(1.0, gt=0, description="decider: flush + offset commit")


class ModelServerSettings(_Section):
    """HTTP endpoint of the published models of ``privacy: local`` bandits."""

    enabled: bool = True
    host: str = "127.0.0.1"
    port: int = Field(9465, ge=0, le=65535)


class GatewaySettings(_Section):
    """``dpbandit gateway``: the Personalizer-compatible HTTP front door (docs/gateway.md)."""

    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535, description="0 picks a free port")
    bandit: str | None = Field(None, description="the bandit served (default: the only one)")
    directory: Path | None = Field(
        None, description="write-ahead log directory (default: <snapshots.directory>/gateway)"
    )
    max_actions: int = Field(50, ge=1, le=10_000, description="actions of one Rank, at most")
    max_buffered: int = Field(
        100_000,
        ge=1,
        description="records written but not yet delivered to the learner, at most: beyond, "
        "the gateway answers 503 with Retry-After",
    )
    retry_after_s: int = Field(5, ge=1, description="Retry-After of a 503")
    fsync_rewards: bool = Field(
        True,
        description="acknowledge a reward only once its record is fsynced (else: once written, "
        "which survives a crash of the process but not of the machine)",
    )
    fsync_decisions: bool = Field(
        False, description="the same for Rank and Activate (costs an fsync in their latency)"
    )
    event_retention_s: float | None = Field(
        None,
        gt=0,
        description="how long event ids are remembered (idempotent Rank, one reward per "
        "event); default: twice the bandit's feedback window, at least 10 minutes",
    )
    max_events: int = Field(1_000_000, ge=1, description="event ids remembered, at most")
    heartbeat_s: float = Field(
        1.0, gt=0, description="feedback watermark heartbeats to the learner, this often"
    )
    model_refresh_ms: int = Field(100, ge=1, description="how often the models topic is read")
    unready_after_s: float = Field(
        10.0,
        gt=0,
        description="/readyz fails once a record has waited this long for the broker",
    )
    delivery_timeout_s: float = Field(
        5.0, gt=0, description="one delivery attempt to the broker waits this long at most"
    )
    replica_id: str | None = Field(
        None, max_length=200, description="this gateway's name in its decisions (default host-pid)"
    )


class ServiceSettings(BaseSettings):
    """Configuration of ``dpbandit serve``.

    Sources, highest priority first: command-line overrides, environment variables
    (``DPBANDIT_...``, nested with ``__``, e.g. ``DPBANDIT_KAFKA__BOOTSTRAP_SERVERS``), the YAML
    file given with ``--config``, defaults.
    """

    model_config = SettingsConfigDict(
        env_prefix="DPBANDIT_",
        env_nested_delimiter="__",
        extra="forbid",
        validate_default=True,
        defer_build=True,
        allow_inf_nan=False,
    )

    mode: Literal["service", "simulation"] = "service"
    kafka: KafkaSettings | None = None
    scaling: ScalingSettings = Field(default_factory=ScalingSettings)
    simulation: SimulationSource = Field(default_factory=SimulationSource)
    file: FileSource | None = None
    bandits: dict[str, BanditSettings] = Field(default_factory=dict)
    snapshots: SnapshotSettings = Field(default_factory=SnapshotSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    model_server: ModelServerSettings = Field(default_factory=ModelServerSettings)
    max_message_bytes: int = Field(1_000_000, ge=1024)
    max_batch: int = Field(2048, ge=1)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_json: bool = False
    progress: bool = True
    idle_timeout_s: float = Field(
        30.0,
        gt=0,
        description="force-expire joins of a blocked bandit after this long idle (at once "
        "when a finite input has ended)",
    )
    blocked_warning_s: float = Field(
        5.0,
        gt=0,
        description="warn when a bandit has waited this long for the rewards its next release "
        "reads (its contexts wait meanwhile), naming what it waits for and the setting to change",
    )
    max_event_time_skew_s: float | None = Field(
        300.0,
        gt=0,
        allow_inf_nan=False,
        description="contexts, rewards and heartbeats stamped more than this many seconds "
        "ahead of the stream clock (the record's Kafka timestamp, or the wall clock if earlier) "
        "are dead-lettered (event_time_out_of_range): a far-future event would stall its "
        "bandit until that time; null disables (simulated streams from the future)",
    )
    max_event_time_lag_s: float | None = Field(
        86_400.0,
        gt=0,
        allow_inf_nan=False,
        description="contexts, rewards and heartbeats stamped more than this many seconds "
        "before their record's timestamp are dead-lettered (event_time_out_of_range): a "
        "context from 1970 would be decided and its join expire at once; null disables. "
        "Records without a timestamp (a --file line without one) are not bounded below "
        "(docs/service.md, The stream clock)",
    )
    broadcast: BroadcastSettings | None = None
    gateway: GatewaySettings = Field(default_factory=GatewaySettings)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ):
        yaml_file = YAML_FILE.get("path")
        sources = [init_settings, env_settings]
        if yaml_file is not None:
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=yaml_file))
        return tuple(sources)

    def kafka_section(self) -> KafkaSettings:
        """The ``kafka`` section, for the parts of the service that run on Kafka only (the
        runner chooses them when the section is present)."""
        if self.kafka is None:
            raise ValueError("this part of the service needs a kafka section")
        return self.kafka

    def broadcast_section(self) -> BroadcastSettings:
        """The ``broadcast`` section, for the learner and the decision replicas."""
        if self.broadcast is None:
            raise ValueError("this part of the service needs a broadcast section")
        return self.broadcast

    @model_validator(mode="after")
    def _check(self):
        for name, b in self.bandits.items():
            validate_for_mode(b.policy, self.mode)
            is_ldp = b.policy.policy == "ldp-glb"  # the local-DP runtime (stream/local/)
            if b.privacy == "local" and not is_ldp:
                raise ValueError(f"bandit {name}: privacy=local needs policy ldp-glb")
            if is_ldp and b.privacy != "local":
                raise ValueError(
                    f"bandit {name}: policy ldp-glb runs with privacy=local (the devices "
                    "privatise their reports; a central ldp-glb bandit would see raw data)"
                )
            if is_slate(b.policy.policy):
                _check_slate_bandit(name, b)
            if b.reward_bounds is not None and not b.reward_bounds[0] < b.reward_bounds[1]:
                raise ValueError(
                    f"bandit {name}: reward_bounds must be (low, high) with low < high"
                )
        unkeyed = [
            name
            for name, b in self.bandits.items()
            if b.user_level is not None and b.user_level.key_file is None and b.seed is None
        ]
        if unkeyed and self.broadcast is not None:  # replicas hash, the learner admits
            raise ValueError(
                f"bandit {unkeyed[0]}: user_level in a broadcast needs user_level.key_file (a "
                "secret shared by the learner and every decision replica; docs/scaling.md)"
            )
        topics = self.kafka.topics if self.kafka else None
        if (
            topics
            and len({topics.contexts, topics.feedback, topics.decisions, topics.dead_letter}) < 4
        ):
            raise ValueError("the four topics must have different names")
        if (
            topics
            and any(b.privacy == "local" for b in self.bandits.values())
            and topics.models
            in {topics.contexts, topics.feedback, topics.decisions, topics.dead_letter}
        ):
            raise ValueError("the models topic must differ from the other topics")
        if self.scaling.mode == "group" and self.kafka is None:
            raise ValueError("scaling.mode 'group' needs the kafka section (replicas share topics)")
        if self.scaling.mode == "group" and any(
            b.privacy == "local" for b in self.bandits.values()
        ):
            raise ValueError(
                "privacy=local bandits run in scaling.mode 'single' (their server model is "
                "small; scale the devices, not the server)"
            )
        if self.scaling.mode == "group" and self.broadcast is not None:
            raise ValueError(
                "scaling.mode 'group' (many bandits over replicas) and broadcast (one bandit, "
                "a learner and decision replicas) are different patterns: choose one"
            )
        return self


def _check_slate_bandit(name: str, b: BanditSettings) -> None:
    """A slate bandit finalizes every served item at the deadline (DP-matroid spec §7.2): a
    missing reward becomes the *policy's* ``default_reward`` — dropping it would make the batch
    composition depend on which feedback arrived — so the bandit-level ``on_expiry`` does not
    apply and a bandit-level ``default_reward`` other than 0 must agree with the policy's."""
    policy_default = getattr(b.policy, "default_reward", 0.0)  # every slate config has one
    if b.default_reward != 0.0 and b.default_reward != policy_default:
        raise ValueError(
            f"bandit {name}: set the default reward of a slate bandit in its policy "
            "(policy.default_reward)"
        )
    if b.arms is not None:
        raise ValueError(f"bandit {name}: a slate bandit's catalogue is its policy's 'items'")
