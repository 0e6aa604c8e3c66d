"""Versioned event schemas (pydantic v2). Documented in ``docs/events.md``.

Every message is one JSON object. Times are event times in seconds since the Unix epoch
(floats; ISO-8601 strings are accepted on input). Non-finite numbers are rejected.
"""

from __future__ import annotations

import datetime as _dt
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "SCHEMA_VERSION",
    "ArmFeatures",
    "ContextEvent",
    "DeadLetter",
    "Decision",
    "Feedback",
    "SlateDecision",
    "SlateFeedback",
    "SlateItem",
    "Watermark",
    "parse_decision",
    "parse_feedback",
]

SCHEMA_VERSION = 1

Id = Annotated[str, Field(min_length=1, max_length=200)]


def _to_epoch(v):
    if isinstance(v, bool):
        raise ValueError("event_time must be a number of seconds or an ISO-8601 string")
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        try:
            dt = _dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError("event_time must be epoch seconds or ISO-8601") from None
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=_dt.timezone.utc)
        return dt.timestamp()
    if isinstance(v, _dt.datetime):
        return v.timestamp()
    raise ValueError("event_time must be epoch seconds or ISO-8601")


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)


class ArmFeatures(_Event):
    """One candidate arm with its feature vector."""

    arm_id: Id
    features: list[float] = Field(min_length=1)


class ContextEvent(_Event):
    """A request for a decision (topic ``contexts``, key = bandit_id).

    Either ``arms`` (per-arm feature vectors) or ``shared`` + ``arm_ids`` (one shared context;
    the bandit's configuration maps it to per-arm features), or — for a slate bandit — only
    ``slate_size``: a request for a slate of that many items from the bandit's item catalogue
    (its matroid's ground set; a slate request carries no features).

    >>> ContextEvent.model_validate_json(
    ...     '{"v": 1, "event_id": "e1", "bandit_id": "b", "event_time": 1.5,'
    ...     ' "arms": [{"arm_id": "a", "features": [0.1, 0.2]}]}').candidate_ids()
    ['a']
    >>> ContextEvent.model_validate_json(
    ...     '{"event_id": "e2", "bandit_id": "s", "event_time": 2, "slate_size": 10}').slate_size
    10
    """

    v: Literal[1] = 1
    event_id: Id
    bandit_id: Id
    event_time: float
    arms: list[ArmFeatures] | None = Field(None, min_length=1, max_length=10_000)
    shared: list[float] | None = Field(None, min_length=1)
    arm_ids: list[Id] | None = Field(None, min_length=1, max_length=10_000)
    user_id: Id | None = None
    slate_size: int | None = Field(None, ge=1, le=10_000)

    @field_validator("event_time", mode="before")
    @classmethod
    def _time(cls, v):
        return _to_epoch(v)

    @model_validator(mode="after")
    def _one_form(self):
        per_arm = self.arms is not None
        shared = self.shared is not None or self.arm_ids is not None
        if self.slate_size is not None:
            if per_arm or shared:
                raise ValueError(
                    "a slate request ('slate_size') takes no 'arms', 'shared' or 'arm_ids': "
                    "the bandit's item catalogue is its ground set"
                )
            return self
        if per_arm == shared:
            raise ValueError("give either 'arms' or 'shared' with 'arm_ids'")
        if shared and (self.shared is None or self.arm_ids is None):
            raise ValueError("'shared' and 'arm_ids' go together")
        ids = self.candidate_ids()
        if len(set(ids)) != len(ids):
            raise ValueError("arm ids must be unique within an event")
        if per_arm and len({len(a.features) for a in self.arms}) != 1:
            raise ValueError("every arm must have the same number of features")
        return self

    def candidate_ids(self) -> list[str]:
        """The candidate arm ids, in order (none for a slate request)."""
        if self.arms is not None:
            return [a.arm_id for a in self.arms]
        return list(self.arm_ids or [])


class Decision(_Event):
    """The service's answer (topic ``decisions``, key = bandit_id)."""

    v: Literal[1] = 1
    event_id: Id
    bandit_id: Id
    arm_id: Id
    arm_index: int
    propensity: float
    model_version: int
    episode: int
    round: int
    calibration: str
    policy: str
    decided_at: float


class SlateItem(_Event):
    """One served item of a slate: its id, its index in the catalogue, and its key.

    ``key`` is the index the greedy ranked it by (a UCB or a Thompson sample; public
    post-processing of released statistics); ``null`` means +∞ (never played yet).
    """

    item_id: Id
    item_index: int
    key: float | None = None


class SlateDecision(_Event):
    """A slate bandit's answer (topic ``decisions``, key = bandit_id): ``slate`` lists the served
    items in greedy acceptance order. Told apart from a :class:`Decision` by its ``slate``."""

    v: Literal[1] = 1
    event_id: Id
    bandit_id: Id
    slate: list[SlateItem] = Field(min_length=1)
    model_version: int
    round: int
    calibration: str
    policy: str
    decided_at: float


class Feedback(_Event):
    """A reward for an earlier decision (topic ``feedback``, key = bandit_id).

    ``event_time`` is when the reward happened; it decides whether the reward is within the
    bandit's feedback window (see ``docs/service.md``).
    """

    v: Literal[1] = 1
    event_id: Id
    bandit_id: Id
    reward: float
    event_time: float

    @field_validator("event_time", mode="before")
    @classmethod
    def _time(cls, v):
        return _to_epoch(v)


class SlateFeedback(_Event):
    """Per-item rewards of an earlier slate decision (topic ``feedback``; semi-bandit feedback).

    ``rewards`` maps served item ids to their rewards; a slate's items may be reported in one
    message or in several. The first value of each item counts; items never reported by the
    deadline get the bandit's default reward.

    >>> SlateFeedback.model_validate_json(
    ...     '{"event_id": "e2", "bandit_id": "s", "event_time": 3, "rewards": {"i7": 1}}').rewards
    {'i7': 1.0}
    """

    v: Literal[1] = 1
    event_id: Id
    bandit_id: Id
    rewards: dict[Id, float] = Field(min_length=1, max_length=10_000)
    event_time: float

    @field_validator("event_time", mode="before")
    @classmethod
    def _time(cls, v):
        return _to_epoch(v)


class DeadLetter(_Event):
    """A message the service could not use (topic ``dead-letter``), with the reason."""

    v: Literal[1] = 1
    source_topic: str
    partition: int
    offset: int
    reason: str
    detail: str = ""
    payload: str = ""
    payload_bytes: int = 0
    at: float


class Watermark(_Event):
    """A heartbeat on the feedback topic: no later feedback of this bandit is older than
    ``event_time`` (lets pending joins expire when rewards are sparse)."""

    v: Literal[1] = 1
    type: Literal["watermark"]
    bandit_id: Id
    event_time: float

    @field_validator("event_time", mode="before")
    @classmethod
    def _time(cls, v):
        return _to_epoch(v)


def parse_feedback(raw: bytes) -> Feedback | SlateFeedback | Watermark:
    """Parse a feedback-topic message (a reward, per-item slate rewards, or a heartbeat).

    >>> parse_feedback(b'{"type": "watermark", "bandit_id": "b", "event_time": 5}').event_time
    5.0
    >>> parse_feedback(b'{"event_id": "e", "bandit_id": "b", "reward": 1, "event_time": 5}').reward
    1.0
    >>> type(parse_feedback(
    ...     b'{"event_id": "e", "bandit_id": "b", "rewards": {"a": 0}, "event_time": 5}')).__name__
    'SlateFeedback'
    """
    if b'"watermark"' in raw:
        try:
            return Watermark.model_validate_json(raw)
        except ValueError:
            pass
    if b'"rewards"' in raw:
        try:
            return SlateFeedback.model_validate_json(raw)
        except ValueError as slate_err:
            try:  # e.g. a v1 reward whose event id is literally "rewards"
                return Feedback.model_validate_json(raw)
            except ValueError:
                raise slate_err from None
    return Feedback.model_validate_json(raw)


def parse_decision(raw: bytes) -> Decision | SlateDecision:
    """Parse a decisions-topic message: a single-arm :class:`Decision` or a :class:`SlateDecision`
    (for readers of the decisions topic, e.g. offline replay).

    >>> parse_decision(b'{"event_id": "e", "bandit_id": "s", "slate": [{"item_id": "a",'
    ...     b' "item_index": 0, "key": null}], "model_version": 0, "round": 1,'
    ...     b' "calibration": "certified", "policy": "dpts-mat", "decided_at": 1.0}').slate[0].key
    """
    if b'"slate"' in raw:
        try:
            return SlateDecision.model_validate_json(raw)
        except ValueError as slate_err:
            try:
                return Decision.model_validate_json(raw)
            except ValueError:
                raise slate_err from None
    return Decision.model_validate_json(raw)
