"""The gateway's work behind the HTTP routes: Rank, Reward, Activate (docs/gateway.md).

* **Rank** featurises the request (``features/hashing.py``), decides with the bandit's latest
  *released* model exactly as a broadcast decision replica does (``decide_frozen`` of a
  decide-only policy loaded with the released model: post-processing, no privacy cost), ranks
  the other actions by the model's scores, writes the decision — a
  :class:`~..stream.scaling.broadcast.BroadcastDecision` carrying the chosen action's feature
  row and its propensity — to the write-ahead log, and answers.
* **Reward** checks the event (known, activated, not yet rewarded, inside its feedback window)
  and the value (finite, inside the bandit's ``reward_bounds``), writes the
  :class:`~..stream.schemas.Feedback` record and answers once it is durable.
* **Activate** writes a deferred decision, stamped with the activation time, for the learner.

The log's records reach the learner through the outlet (``outlets.py``): Kafka, or the learner
running in this process. Every answer is given after its record is in the log, so a kill -9
loses nothing acknowledged, and a repeated Rank gets the stored answer (``events.py``).
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..features import FeatureError
from .events import Event, EventTable
from .wal import Kind, WriteAheadLog

__all__ = ["Gateway", "GatewayError", "ModelHolder"]

log = logging.getLogger("streaming_dpbandit.gateway")

#: a JSON string literal, as json.dumps writes it (ASCII, escaped)
_esc = json.encoder.encode_basestring_ascii


class GatewayError(Exception):
    """A refused request: HTTP ``status``, a Personalizer-style error ``code``, a message and
    the ``target`` field it concerns."""

    def __init__(self, status: int, code: str, message: str, target: str | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.target = target


class ModelHolder:
    """The bandit's decide-only policy, with the latest released model it has seen."""

    def __init__(self, name: str, bandit_settings: Any, metrics: Any = None):
        self.name = name
        self.settings = bandit_settings
        self.metrics = metrics
        self.lock = threading.Lock()
        self.policy = self.fresh()
        self.version = 0
        self.loaded_at = 0.0

    def fresh(self) -> Any:
        """A new policy of the configuration, deciding with its initial model."""
        pol = self.settings.policy
        overrides = {"bandit_id": self.name} if "bandit_id" in type(pol).model_fields else {}
        return pol.build(seed=self.settings.seed, **overrides)

    def apply(self, msg: Any) -> bool:
        """Take a :class:`~..stream.scaling.models_topic.ModelMessage` into use if newer."""
        with self.lock:
            if msg.bandit_id != self.name or msg.model_version <= self.version:
                return False
            cal = getattr(self.policy, "calibration", "non-private")
            if msg.policy != self.policy.name or msg.calibration != cal:
                log.warning("models topic: a %s/%s model for a %s bandit: ignored", msg.policy,
                            msg.calibration, self.policy.name)  # fmt: skip
                return False
            try:
                pol = self.fresh().load_released_model(msg.released_model())
            except ValueError as err:
                log.warning("models topic: invalid model version %d: %s", msg.model_version, err)
                return False
            self.policy, self.version = pol, msg.model_version  # one swap: requests see either
            self.loaded_at = time.time()
        if self.metrics is not None:
            self.metrics.model_version.labels(self.name).set(msg.model_version)
        log.info("bandit %s: deciding with model version %d (published %.3f s ago)", self.name,
                 msg.model_version, self.loaded_at - msg.published_at)  # fmt: skip
        return True


def choose_bandit(settings: Any) -> str:
    """The served bandit: ``gateway.bandit``, or the only configured one."""
    name = settings.gateway.bandit
    if name is None:
        if len(settings.bandits) != 1:
            raise ConfigError(
                f"gateway: {len(settings.bandits)} bandits are configured: name the one to "
                "serve with --bandit (or gateway.bandit)"
            )
        name = next(iter(settings.bandits))
    if name not in settings.bandits:
        raise ConfigError(f"gateway.bandit: no bandit {name!r} is configured")
    bs = settings.bandits[name]
    if bs.privacy == "local":
        raise ConfigError(f"gateway: bandit {name!r} is privacy=local: devices decide")
    if bs.user_level is not None:
        raise ConfigError(
            f"gateway: bandit {name!r} has a user_level section; Personalizer requests carry no "
            "user id, so the gateway serves event-level bandits only"
        )
    cls = type(bs.policy.build(seed=0))
    if not cls.supports_released_model or getattr(cls, "slates", False):
        raise ConfigError(
            f"gateway: bandit {name!r} runs policy {cls.name!r}, which cannot decide from a "
            "released model (supported: fliphat)"
        )
    return name


class Gateway:
    """The Rank / Reward / Activate logic of one bandit (module docstring).

    Parameters
    ----------
    settings
        Validated service settings (``gateway`` section; ``kafka`` for the Kafka outlet).
    metrics
        :class:`~..metrics.GatewayMetrics`.
    learner_metrics
        The embedded learner's :class:`~..metrics.ServiceMetrics` (same registry).
    """

    def __init__(self, settings: Any, metrics: Any, learner_metrics: Any = None):
        self.settings = settings
        self.metrics = metrics
        self.learner_metrics = learner_metrics

    # -- set-up -------------------------------------------------------------------------------
    def open(self) -> None:
        from ..probes import Readiness

        s, g = self.settings, self.settings.gateway
        # /livez and /readyz (probes.Readiness): the log, the delivery to the learner, the
        # bound of the buffer; the broker watched like the service's
        self.readiness = Readiness(
            broker=s.kafka.bootstrap_servers if s.kafka is not None else None,
            broker_timeout_s=g.unready_after_s,
            stall_timeout_s=max(30.0, 10 * g.heartbeat_s),
        )
        self.readiness.require("log", "opening the write-ahead log")
        self.bandit = choose_bandit(s)
        self.bs = bs = s.bandits[self.bandit]
        self.d = int(bs.policy.d)
        self.hasher = bs.featuriser()
        self.replica = g.replica_id or f"gateway-{socket.gethostname()}-{os.getpid()}"
        self.window = float(bs.feedback_window)
        self.bounds = bs.reward_bounds
        retention = g.event_retention_s or max(2 * self.window, 600.0)
        self.events = EventTable(g.max_events, retention)
        self.models = ModelHolder(self.bandit, bs, self.metrics)
        probe = self.models.policy
        self.policy_name = probe.name
        self.calibration = getattr(probe, "calibration", "non-private")
        directory = g.directory or (s.snapshots.directory / "gateway")
        self.wal = WriteAheadLog(directory, fsync=True, retention_s=retention)
        entries = self.wal.open()
        self.events.replay(entries)
        self.readiness.set("log", True, f"{len(self.events)} events remembered")
        self.outlet = self._outlet()
        self.wal.on_append = self.outlet.submit
        self.outlet.open(entries)  # (records after its last delivery are sent again)
        self.key_json = json.dumps(self.bandit)
        self.stop = threading.Event()
        self.heartbeats = threading.Thread(target=self._heartbeat, name="gateway-heartbeat",
                                           daemon=True)  # fmt: skip
        self.heartbeats.start()
        self.opened = time.monotonic()
        log.info("gateway: bandit %s (%s, d = %d), %d events remembered, log in %s",
                 self.bandit, self.policy_name, self.d, len(self.events), directory)  # fmt: skip

    def _outlet(self) -> Any:
        from .outlets import EmbeddedOutlet, KafkaOutlet

        s = self.settings
        if s.kafka is not None:
            models_topic = s.broadcast.models_topic if s.broadcast else s.kafka.topics.models
            return KafkaOutlet(s, self.wal, self.bandit, self.models.apply, models_topic,
                               self.metrics)  # fmt: skip
        from ..settings import BroadcastSettings

        learner = s.model_copy(
            update={
                "bandits": {self.bandit: self.bs},
                "broadcast": BroadcastSettings(role="learner"),
            }
        )
        return EmbeddedOutlet(learner, self.wal, self.models.apply, self.learner_metrics)

    def close(self) -> None:
        self.readiness.stopped("stopping")
        self.stop.set()
        self.heartbeats.join(timeout=5)
        self.outlet.close()
        self.wal.close()

    # -- health -------------------------------------------------------------------------------
    def probe(self, path: str) -> tuple[int, dict[str, Any]] | None:
        """``/livez`` / ``/readyz`` (``probes.Readiness``), the gateway's checks refreshed."""
        if path == "/readyz":
            ok, why = self.outlet.healthy()
            self.readiness.set("delivery", ok, why or "records reach the learner")
            n, bound = self.outlet.backlog, self.settings.gateway.max_buffered
            self.readiness.set("buffer", n < bound, f"{n} records buffered (bound {bound})")
        return self.readiness.answer(path)

    def _check_capacity(self) -> None:
        n = self.outlet.backlog
        self.metrics.buffered.set(n)
        if n >= self.settings.gateway.max_buffered:
            raise GatewayError(
                503,
                "ServiceUnavailable",
                f"{n} records wait for the learner (the bound, gateway.max_buffered): try again "
                "later",
            )

    def _heartbeat(self) -> None:
        every = self.settings.gateway.heartbeat_s
        while not self.stop.wait(every):
            self.readiness.beat()
            try:
                self.wal.append(Kind.HEARTBEAT, "", self._watermark)
            except OSError as err:  # a full disk: requests report it too
                log.error("cannot write a heartbeat: %s", err)
            self.metrics.buffered.set(self.outlet.backlog)
            self.metrics.events_remembered.set(len(self.events))

    def _watermark(self, t: float) -> tuple[bytes, bytes]:
        return (
            f'{{"v":1,"type":"watermark","bandit_id":{self.key_json},"event_time":{t!r}}}'
        ).encode(), b""

    # -- Rank ---------------------------------------------------------------------------------
    def rank(self, req: Any, digest: bytes) -> tuple[bytes, int, int]:
        """Answer a validated :class:`~.api.RankRequest`; returns (response JSON, log seq,
        the model version of the decision)."""
        event_id = req.eventId or uuid.uuid4().hex
        actions = req.actions
        ids = [a.id for a in actions]
        old = self.events.get(event_id)
        if old is not None:
            if old.digest != digest:
                raise GatewayError(
                    409,
                    "EventIdConflict",
                    f"event {event_id!r} was already ranked with another request; a retry must "
                    "repeat the request (or use a new eventId)",
                    "eventId",
                )
            return self._answer(event_id, ids, old), -1, old.version
        self._check_capacity()
        K = len(actions)
        if K > self.settings.gateway.max_actions:
            raise GatewayError(400, "InvalidRequest",
                               f"{K} actions, at most {self.settings.gateway.max_actions}",
                               "actions")  # fmt: skip
        position = {a: k for k, a in enumerate(ids)}
        if len(position) != K:
            seen: set[str] = set()
            for k, a in enumerate(ids):
                if a in seen:
                    raise GatewayError(400, "InvalidRequest", f"duplicate action id {a!r}",
                                       f"actions[{k}].id")  # fmt: skip
                seen.add(a)
        mask = None
        if req.excludedActions:
            mask = np.ones((1, K), dtype=bool)
            for j, a in enumerate(req.excludedActions):
                at = position.get(a)
                if at is None:
                    raise GatewayError(400, "InvalidRequest", f"no action with id {a!r}",
                                       f"excludedActions[{j}]")  # fmt: skip
                mask[0, at] = False
            if not mask.any():
                raise GatewayError(400, "InvalidRequest", "every action is excluded",
                                   "excludedActions")  # fmt: skip
        try:
            X = self.hasher.transform(
                req.contextFeatures, [a.features for a in actions], memo=True
            )  # (a parsed request: not changed after)
        except FeatureError as err:
            raise GatewayError(400, "InvalidFeature", err.message, err.field) from None
        ev = self.decide(X, event_id, mask, digest)
        deferred = bool(req.deferActivation)
        row = X[ev.arm]
        arm_id = ids[ev.arm]

        def make(t: float) -> tuple[bytes, bytes]:
            ev.time = ev.active_at = t
            return self._decision(event_id, arm_id, ev, row, t), ev.encode()

        entry = self.wal.append(Kind.DEFERRED if deferred else Kind.DECISION, event_id, make)
        if deferred:
            ev.deferred, ev.activated, ev.pending = True, False, entry.value
        self.events.add(event_id, ev)
        self.metrics.decisions.labels(self.bandit).inc()
        return self._answer(event_id, ids, ev), entry.seq, ev.version

    def decide(self, X: Any, event_id: str, mask: Any, digest: bytes = b"\0" * 8) -> Event:
        """Decide one event with the model in force: the chosen action, its propensity and
        the ranking (the chosen action and its ties first, then by score; excluded last)."""
        arm, prop, version, scores = self.models.policy.rank_frozen(X, event_id, mask)
        # by score, highest first (stable): the chosen action's ties lead, excluded ones trail;
        # the chosen action itself first
        order = np.argsort(-scores, kind="stable")
        if order[0] != arm:  # (a tie the coins broke for another of the top actions)
            order = np.concatenate(([arm], order[order != arm]))
        order = order.astype("<u2")
        n_top = int(np.count_nonzero(scores == scores[arm]))
        return Event(0.0, arm, prop, version, order.tobytes(), n_top, digest)

    def _decision(self, event_id: str, arm_id: str, ev: Event, row: Any, t: float) -> bytes:
        """The :class:`~..stream.scaling.broadcast.BroadcastDecision` of an event, as JSON."""
        return json.dumps(
            {
                "v": 1,
                "event_id": event_id,
                "bandit_id": self.bandit,
                "arm_id": arm_id,
                "arm_index": ev.arm,
                "propensity": ev.propensity,
                "model_version": ev.version,
                "episode": ev.version,
                "round": 0,
                "calibration": self.calibration,
                "policy": self.policy_name,
                "decided_at": t,
                "event_time": t,
                "features": row.tolist(),
                "replica": self.replica,
            },
            separators=(",", ":"),
        ).encode()

    def _answer(self, event_id: str, ids: Sequence[str], ev: Event) -> bytes:
        """The Rank response, as ``json.dumps(..., separators=(",", ":"))`` writes it, put
        together from its escaped strings (a quarter of the encoder's cost for 50 actions)."""
        top = ',"probability":' + float.__repr__(ev.propensity) + "}"
        n_top = ev.n_top
        parts = [
            '{"id":' + _esc(ids[k]) + (top if i < n_top else ',"probability":0.0}')
            for i, k in enumerate(ev.ranking().tolist())
        ]
        return (
            '{"ranking":[' + ",".join(parts) + '],"eventId":' + _esc(event_id)
            + ',"rewardActionId":' + _esc(ids[ev.arm]) + "}"
        ).encode()  # fmt: skip

    # -- Reward, Activate ---------------------------------------------------------------------
    def _event(self, event_id: str) -> Event:
        ev = self.events.get(event_id)
        if ev is None:
            raise GatewayError(
                404,
                "EventNotFound",
                f"no ranked event {event_id!r} (never ranked here, or older than the "
                "gateway's event retention)",
                "eventId",
            )
        return ev

    def reward(self, event_id: str, value: float) -> int:
        """Record the reward of an event; returns its log seq (wait for it to be durable)."""
        if not math.isfinite(value):
            raise GatewayError(400, "InvalidRequest", "value must be a finite number", "value")
        if self.bounds is not None and not self.bounds[0] <= value <= self.bounds[1]:
            lo, hi = self.bounds
            raise GatewayError(400, "InvalidRequest",
                               f"value {value!r} outside the bandit's reward_bounds [{lo}, {hi}]",
                               "value")  # fmt: skip
        ev = self._event(event_id)
        if ev.rewarded:
            raise GatewayError(409, "DuplicateReward",
                               f"event {event_id!r} already has its reward; only the first "
                               "counts", "eventId")  # fmt: skip
        if not ev.activated:
            raise GatewayError(409, "EventNotActivated",
                               f"event {event_id!r} was ranked with deferActivation: activate "
                               "it before sending its reward", "eventId")  # fmt: skip
        if self.wal.now() > ev.active_at + self.window:
            raise GatewayError(409, "RewardWindowClosed",
                               f"the feedback window ({self.window:g} s) of event {event_id!r} "
                               "has passed; the learner would not use this reward",
                               "eventId")  # fmt: skip
        self._check_capacity()
        eid = json.dumps(event_id)

        def make(t: float) -> tuple[bytes, bytes]:
            return (
                f'{{"v":1,"event_id":{eid},"bandit_id":{self.key_json},"reward":{value!r},'
                f'"event_time":{t!r}}}'
            ).encode(), b""

        entry = self.wal.append(Kind.REWARD, event_id, make)
        ev.rewarded = True
        self.metrics.rewards.labels(self.bandit).inc()
        return entry.seq

    def activate(self, event_id: str) -> int:
        """Activate a deferred event (idempotent); returns its log seq, or −1 if nothing new."""
        ev = self._event(event_id)
        if ev.activated:
            return -1
        self._check_capacity()
        stored = json.loads(ev.pending or b"{}")

        def make(t: float) -> tuple[bytes, bytes]:
            stored["decided_at"] = stored["event_time"] = t
            ev.active_at = t
            return json.dumps(stored, separators=(",", ":")).encode(), b""

        entry = self.wal.append(Kind.ACTIVATE, event_id, make)
        ev.activated, ev.pending = True, None
        return entry.seq

    def needs_sync(self, seq: int, reward: bool) -> bool:
        """Must the answer to record ``seq`` wait for its ``fsync`` (settings ``fsync_*``)?"""
        g = self.settings.gateway
        return seq >= 0 and (g.fsync_rewards if reward else g.fsync_decisions)

    def wait_durable(self, seq: int, reward: bool) -> bool:
        if not self.needs_sync(seq, reward):
            return True
        return self.wal.wait_durable(seq)
