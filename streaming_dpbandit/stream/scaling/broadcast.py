"""One big bandit: decision replicas serve the latest released model, one learner learns
(docs/scaling.md, pattern 2).

* decision replicas (``broadcast.role: decider``, :mod:`.replica`) decide every context with
  the latest released model they hold and publish a :class:`BroadcastDecision` tagged with
  the model version and carrying the chosen arm's feature row.
* :func:`learner_service` (``broadcast.role: learner``) — the single service that owns the
  bandit's statistics, reward join, snapshots and ledger. It is the ordinary service loop with the
  decisions topic in place of the contexts topic: the n-th decision of the bandit's decisions
  partition is round n (a data-independent count), so episodes — and release points — are
  reached exactly as if it had decided itself, and every row enters exactly one fit. At a
  release it persists first (snapshot, then ledger) and then publishes the released model.
  It is a :class:`~streaming_dpbandit.stream.service.Service` given other collaborators
  (the decisions parser, :class:`~streaming_dpbandit.stream.hooks.RecordRounds`,
  :class:`ModelPublisher`), not a subclass.

Privacy is unaffected: a decision is a function of the user's own context and of released
models only (the billboard model of joint DP), and the learner's releases are exactly the
single service's. What weakens is the utility analysis' assumption that the decisions of
episode k use the model fitted on episode k − 1 from the episode's start: replicas switch after
a pickup delay (docs/scaling.md).
"""

from __future__ import annotations

import logging
from typing import cast

import numpy as np
from pydantic import Field

from ...errors import ConfigError
from ...settings import ServiceSettings, TopicsSettings
from ..bandit import BanditRuntime
from ..hooks import RecordRounds, ReleaseHook
from ..join import EarlyFeedback, JoinStore
from ..parsing import BadInput, ContextParser, Pending
from ..schemas import Decision
from ..service import Service
from .models_topic import ModelMessage, ensure_models_topic, model_message

__all__ = [
    "DECISIONS",
    "BroadcastDecision",
    "LearnerRuntime",
    "ModelPublisher",
    "check_broadcast",
    "ensure_broadcast_topics",
    "learner_kafka_settings",
    "learner_service",
    "user_hashes",
    "user_key_id",
]

log = logging.getLogger("streaming_dpbandit.broadcast")


class BroadcastDecision(Decision):
    """A decision replica's answer (topic ``decisions``, key = bandit_id).

    Besides :class:`~streaming_dpbandit.stream.schemas.Decision`'s fields (``round`` is 0: the
    learner numbers rounds by arrival; ``episode`` is the model's episode): the context's
    ``event_time`` (for the reward join), the chosen arm's ``features`` (the learner's row) and
    the ``replica`` that decided.
    """

    event_time: float
    features: list[float]
    replica: str
    #: user level (a bandit with a ``user_level`` section): the keyed hash of the context's
    #: ``user_id`` (16 hex digits) and the hash key's fingerprint, never the id itself
    user_hash: str | None = Field(None, pattern=r"^[0-9a-f]{16}$")
    user_key: str | None = Field(None, pattern=r"^[0-9a-f]{16}$")


def check_broadcast(settings: ServiceSettings) -> None:
    """Refuse invalid model-broadcast configurations with one clear :class:`ConfigError`."""
    b = settings.broadcast
    if b is None:
        return
    if settings.kafka is None:
        raise ConfigError("broadcast: a model broadcast needs the kafka section")
    t = settings.kafka.topics
    if b.models_topic in {t.contexts, t.feedback, t.decisions, t.dead_letter}:
        raise ConfigError("broadcast.models_topic must differ from the four service topics")
    if not settings.bandits:
        raise ConfigError("broadcast: no bandit is configured")
    for name, bs in settings.bandits.items():
        cls = type(bs.policy.build(seed=0))
        if not cls.supports_released_model:
            raise ConfigError(
                f"broadcast: bandit {name!r} runs policy {cls.name!r}, which cannot be served "
                f"from a released model (supported: fliphat)"
            )


def learner_kafka_settings(settings: ServiceSettings):
    """The learner's transport settings: it reads decisions (not contexts) and feedback in its
    own consumer group; topics are created beforehand."""
    k = settings.kafka_section()
    b = settings.broadcast_section()
    topics = k.topics.model_copy(update={"contexts": k.topics.decisions})
    group = b.learner_group_id or f"{k.group_id}.learner"
    return k.model_copy(update={"topics": topics, "group_id": group, "create_topics": False})


def ensure_broadcast_topics(settings: ServiceSettings, client=None) -> None:
    """Create the service topics and the compacted models topic (``create_topics``)."""
    from ..kafka.transport import ensure_topics

    k, topic = settings.kafka_section(), settings.broadcast_section().models_topic
    if k.create_topics:
        ensure_topics(k, client)
        if ensure_models_topic(k, topic, client):
            log.info("created the compacted models topic %s", topic)


# -- the learner ------------------------------------------------------------------------------
class ReorderingJoin(JoinStore):
    """The reward join of a learner: decisions of several replicas interleave on the decisions
    partition, so their event times are only roughly ordered. The contexts watermark trails
    the largest decision event time by ``allowance`` seconds; feedback for a decision that
    arrives up to that much out of order is held, not declared an orphan, whatever the
    interleaving of the two topics."""

    def __init__(self, d: int, window: float, capacity: int, retention: float, allowance: float):
        super().__init__(d, window, capacity, retention)
        self.allowance = allowance

    def advance_context_watermark(self, t: float) -> list[EarlyFeedback]:
        return super().advance_context_watermark(t - self.allowance)


class LearnerRuntime(BanditRuntime):
    """A bandit runtime whose decisions were made elsewhere: it numbers and joins them.

    Its join tolerates decisions out of event-time order by up to one feedback window
    (:class:`ReorderingJoin`).
    """

    def __init__(self, bandit_id: str, settings, policy, metrics=None):
        super().__init__(bandit_id, settings, policy, metrics)
        j = self.join
        self.join = ReorderingJoin(j.d, j.window, j.capacity, j.retention, j.window)

    def record(self, batch: list[Pending]) -> None:
        """Register decisions read from the decisions topic as the next rounds.

        ``batch`` must not cross a model update (``policy.max_decide_batch()``).
        """
        rounds = self.policy.record_rounds(len(batch))
        if self.user_level:  # admitted here, in the decisions partition's round order
            decs = cast("list[BroadcastDecision]", [p.event for p in batch])
            # (DecisionRows refused decisions without a hash by the learner's key)
            hashes = np.array([int(str(d.user_hash), 16) for d in decs], dtype=np.uint64)
            self.admit_users(batch, rounds, hashes)
        for p, t in zip(batch, rounds.tolist()):
            for early in self.join.add(p.event.event_id, t, p.event.event_time, p.X[0], p.clock):
                self.resolved(early, forced=False)
        self.stats["decided"] += len(batch)


class DecisionRows:
    """The feature row of a broadcast decision: the chosen arm's, of the bandit's dimension.

    For a user-level bandit the decision must carry its user's keyed hash, made with the
    learner's own key (the fingerprint ``user_key`` says which): a replica with another key
    would split a user's counts, so its decisions are dead-lettered, never learned from."""

    def __call__(self, rt: BanditRuntime, dec: BroadcastDecision):
        if len(dec.features) != rt.d:
            raise BadInput(
                "wrong_dimension", f"{len(dec.features)} features, bandit expects {rt.d}"
            )
        if rt.user_level:
            if dec.user_hash is None:
                raise BadInput(
                    "missing_user_id",
                    f"bandit {rt.bandit_id!r} bounds each user's contributions: decisions "
                    "need the user's hash",
                )
            if dec.user_key != user_key_id(rt.policy):
                raise BadInput(
                    "user_key_mismatch",
                    f"decision by replica {dec.replica!r} hashed its user with another key "
                    "than the learner's (user_level.key_file)",
                )
        return np.asarray(dec.features, dtype=np.float64)[None, :], [dec.arm_id]


#: what the key fingerprint hashes: a keyed hash of a constant reveals nothing of the key
_KEY_PROBE = "\x00dpbandit user-key fingerprint"


def user_key_id(policy) -> str:
    """Fingerprint of a ``UserLevel`` policy's user-id hash key (16 hex digits): the keyed hash
    of a fixed string, a pseudo-random value that tells two keys apart and reveals neither."""
    return format(int(policy.hash_users([_KEY_PROBE])[0]), "016x")


def user_hashes(policy, user_ids: list) -> tuple[list[str], str]:
    """A decision replica's user fields: the keyed hashes of ``user_ids`` (16 hex digits each)
    and the key's fingerprint (:func:`user_key_id`)."""
    return [format(int(h), "016x") for h in policy.hash_users(user_ids)], user_key_id(policy)


#: What a learner reads on its decisions topic.
DECISIONS = ContextParser(schema=BroadcastDecision, invalid="invalid_decision", rows=DecisionRows())


class ModelPublisher(ReleaseHook):
    """Publishes a bandit's model in force to the compacted models topic (key = bandit id),
    after the release is durable; replicas ignore versions they already have."""

    def __init__(self, transport, topic: str):
        self.transport = transport
        self.topic = topic
        self.published: list[ModelMessage] = []

    def __call__(self, rt: BanditRuntime) -> None:
        msg = model_message(rt.bandit_id, rt.policy)
        if msg is None:
            return
        self.transport.send(self.topic, rt.bandit_id.encode(), msg.model_dump_json().encode())
        self.transport.flush()
        self.published.append(msg)
        log.info(
            "bandit %s: published model version %d",
            rt.bandit_id,
            msg.model_version,
            extra={"bandit": rt.bandit_id, "model_version": msg.model_version},
        )


def learner_runtime(name: str, settings, policy, metrics) -> LearnerRuntime:
    return LearnerRuntime(name, settings, policy, metrics)


def learner_service(settings: ServiceSettings, transport, metrics=None) -> Service:
    """The single learner of a model broadcast: the service loop over decisions + feedback.

    A :class:`~streaming_dpbandit.stream.service.Service` whose contexts topic is the
    decisions topic (read as :class:`BroadcastDecision`), whose chunks are recorded as rounds
    (:class:`~streaming_dpbandit.stream.hooks.RecordRounds`) and whose releases are published
    to the models topic once durable (:class:`ModelPublisher`, also at start: a release
    persisted before a crash may not have reached the topic): ``service.hooks[0].published``
    lists what it published.

    Parameters
    ----------
    settings
        Settings with ``broadcast.role == "learner"``.
    transport
        A transport over the decisions and feedback topics (see
        :func:`learner_kafka_settings`), or an in-process one in tests.
    metrics
        Collectors (a fresh registry by default).
    """
    topics = settings.kafka.topics if settings.kafka else TopicsSettings()
    publisher = ModelPublisher(transport, settings.broadcast_section().models_topic)
    return Service(
        settings,
        transport,
        metrics,
        # the decisions topic plays the part of the contexts topic
        topics=topics.model_copy(update={"contexts": topics.decisions}),
        parser=DECISIONS,
        runtime=learner_runtime,
        decider=RecordRounds(),
        hooks=[publisher],
    )
