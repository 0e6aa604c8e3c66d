"""Versioned event schemas (pydantic v2). Documented in ``docs/events.md``.

Every message is one JSON object. Times are event times in seconds since the Unix epoch
(floats; ISO-8601 strings are accepted on input). Non-finite numbers are rejected.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from json.encoder import encode_basestring_ascii as _json_str
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema, model_validator
from pydantic_core import PydanticCustomError

__all__ = [
    "SCHEMA_VERSION",
    "ActionFeatureObjects",
    "ArmFeatures",
    "ContextEvent",
    "DeadLetter",
    "Decision",
    "Feedback",
    "SlateDecision",
    "SlateFeedback",
    "SlateItem",
    "Watermark",
    "decision_encoder",
    "parse_decision",
    "parse_feedback",
]

SCHEMA_VERSION = 1

Id = Annotated[str, Field(min_length=1, max_length=200)]

#: Byte order and width of the binary feature fields (``arm_features_f64``, ``shared_f64``).
F64 = np.dtype("<f8")


def _f64(raw: bytes, field: str) -> np.ndarray:
    """Decode a binary feature field (read-only float64 view), or a validation error.

    >>> _f64(np.array([1.0, -2.0]).tobytes(), "x").tolist()
    [1.0, -2.0]
    >>> _f64(np.array([1e200, -1e300]).tobytes(), "x").tolist()
    [1e+200, -1e+300]
    >>> for bad in (np.nan, np.inf, -np.inf):
    ...     try:
    ...         _f64(np.array([1e308, bad]).tobytes(), "x")
    ...     except PydanticCustomError as err:
    ...         print(err.type)
    finite_number
    finite_number
    finite_number
    """
    if not raw or len(raw) % 8:
        raise ValueError(f"'{field}' must hold a whole, non-zero number of float64 values")
    values = np.frombuffer(raw, dtype=F64)
    if not np.isfinite(values).all():
        raise PydanticCustomError(
            "finite_number", "'{field}' holds NaN or infinity", {"field": field}
        )
    return values


def _to_epoch(v: object) -> float:
    """Event time in epoch seconds, or a ``ValueError`` (a validation error, never another
    exception: a 400-digit integer must be dead-lettered, not stop the service).

    >>> _to_epoch(5), _to_epoch("1970-01-01T00:00:10Z")
    (5.0, 10.0)
    >>> for bad in (10**400, True, "soon", [1]):
    ...     try:
    ...         _to_epoch(bad)
    ...     except ValueError as err:
    ...         print(str(err)[:40])
    event_time is out of range
    event_time must be a number of seconds o
    event_time must be epoch seconds or ISO-
    event_time must be epoch seconds or ISO-
    """
    if type(v) is float:  # the common case first
        return v
    if isinstance(v, bool):
        raise ValueError("event_time must be a number of seconds or an ISO-8601 string")
    try:
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
    except (OverflowError, OSError):
        raise ValueError("event_time is out of range") from None
    raise ValueError("event_time must be epoch seconds or ISO-8601")


#: Binary features: base64 text of little-endian float64 values (docs/events.md).
F64Text = Annotated[
    bytes,
    WithJsonSchema(
        {
            "type": "string",
            "contentEncoding": "base64",
            "description": "base64 (standard or URL-safe) of little-endian IEEE-754 float64 "
            "values, row-major",
        }
    ),
]

#: An event time as epoch seconds (given as a number, or an ISO-8601 string).
EventTime = Annotated[
    float,
    BeforeValidator(_to_epoch),
    WithJsonSchema(
        {
            "anyOf": [{"type": "number"}, {"type": "string", "format": "date-time"}],
            "description": "seconds since the Unix epoch, or an ISO-8601 time (UTC if it "
            "names no zone)",
        }
    ),
]


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)


class ArmFeatures(_Event):
    """One candidate arm with its feature vector."""

    arm_id: Id
    features: list[float] = Field(min_length=1)


#: A JSON feature object, hashed by the bandit's featuriser (docs/features.md).
_FEATURE_OBJECT = "a feature object (docs/features.md): an object-valued key names a namespace"
FeatureObject = Annotated[
    dict[str, Any], WithJsonSchema({"type": "object", "description": _FEATURE_OBJECT})
]


class ActionFeatureObjects(_Event):
    """One candidate action in feature objects (hashed by the bandit's featuriser)."""

    arm_id: Id
    features: list[FeatureObject] = Field(default_factory=list, max_length=10_000)


class ContextEvent(_Event):
    """A request for a decision (topic ``contexts``, key = bandit_id).

    Five forms carry features — ``arms`` (per-arm feature vectors), ``arm_ids`` +
    ``arm_features_f64`` (the same matrix in binary), ``shared`` + ``arm_ids`` (one shared
    context; the bandit's configuration maps it to per-arm features), ``shared_f64`` +
    ``arm_ids`` (the same in binary) and ``actions`` with ``context_features`` (feature objects,
    as Azure Personalizer's Rank takes them, hashed by the bandit's featuriser into per-arm rows
    of its dimension: docs/features.md) — and a slate bandit takes only ``slate_size``: a
    request for a slate of that many items from the bandit's item catalogue (its matroid's
    ground set; a slate request carries no features). The binary fields are base64 text of
    float64 values, little-endian, row-major (:func:`~.messages.encode_f64`): no number is
    parsed from text, so they are read several times faster than the JSON lists.

    >>> ContextEvent.model_validate_json(
    ...     '{"v": 1, "event_id": "e1", "bandit_id": "b", "event_time": 1.5,'
    ...     ' "arms": [{"arm_id": "a", "features": [0.1, 0.2]}]}').candidate_ids()
    ['a']
    >>> ContextEvent.model_validate_json(
    ...     '{"event_id": "e2", "bandit_id": "s", "event_time": 2, "slate_size": 10}').slate_size
    10
    >>> from streaming_dpbandit.stream.messages import encode_f64
    >>> ev = ContextEvent.model_validate_json(
    ...     '{"event_id": "e3", "bandit_id": "b", "event_time": 2, "arm_ids": ["a", "b"],'
    ...     f' "arm_features_f64": "{encode_f64([[1.0, -0.5], [0.25, 2.0]])}"}}')
    >>> ev.arm_features().tolist()
    [[1.0, -0.5], [0.25, 2.0]]
    >>> ev = ContextEvent.model_validate_json(
    ...     '{"event_id": "e4", "bandit_id": "b", "event_time": 2,'
    ...     ' "context_features": [{"user": {"tier": "gold"}}],'
    ...     ' "actions": [{"arm_id": "news", "features": [{"type": "news"}]},'
    ...     ' {"arm_id": "sports", "features": [{"type": "sports"}]}]}')
    >>> ev.candidate_ids(), ev.arm_features(), ev.feature_objects()[0]
    (['news', 'sports'], None, [{'user': {'tier': 'gold'}}])
    """

    model_config = ConfigDict(val_json_bytes="base64", ser_json_bytes="base64")

    v: Literal[1] = 1
    event_id: Id
    bandit_id: Id
    event_time: EventTime
    arms: list[ArmFeatures] | None = Field(None, min_length=1, max_length=10_000)
    arm_features_f64: F64Text | None = None
    shared: list[float] | None = Field(None, min_length=1)
    shared_f64: F64Text | None = None
    arm_ids: list[Id] | None = Field(None, min_length=1, max_length=10_000)
    user_id: Id | None = None
    slate_size: int | None = Field(None, ge=1, le=10_000)
    context_features: list[FeatureObject] | None = Field(None, max_length=10_000)
    actions: list[ActionFeatureObjects] | None = Field(None, min_length=1, max_length=10_000)

    @model_validator(mode="after")
    def _one_form(self) -> ContextEvent:
        raw = self.arm_features_f64
        if (  # the fast path: the binary per-arm form alone
            raw is not None
            and self.arm_ids is not None
            and self.arms is None
            and self.shared is None
            and self.shared_f64 is None
            and self.slate_size is None
            and self.actions is None
        ):
            ids = self.arm_ids
            if len(set(ids)) != len(ids):
                raise ValueError("arm ids must be unique within an event")
            if len(raw) % (8 * len(ids)):
                raise ValueError(
                    f"'arm_features_f64' holds {len(raw)} bytes: not a whole number of float64 "
                    f"features for each of the {len(ids)} arms"
                )
            _f64(raw, "arm_features_f64")
            return self
        forms = [
            name
            for name in ("arms", "arm_features_f64", "shared", "shared_f64", "actions")
            if getattr(self, name) is not None
        ]
        if self.context_features is not None and self.actions is None:
            raise ValueError("'context_features' goes with 'actions' (feature objects)")
        if self.slate_size is not None:
            if forms or self.arm_ids is not None:
                raise ValueError(
                    "a slate request ('slate_size') takes no 'arms', 'shared' or 'arm_ids': "
                    "the bandit's item catalogue is its ground set"
                )
            return self
        if len(forms) != 1:
            raise ValueError(
                "give either 'arms', 'arm_features_f64' with 'arm_ids', 'shared' (or "
                "'shared_f64') with 'arm_ids', or 'actions' (with 'context_features')"
            )
        form = forms[0]
        if form in ("arms", "actions"):
            if self.arm_ids is not None:
                raise ValueError(f"'{form}' carries its own arm ids: drop 'arm_ids'")
        elif self.arm_ids is None:
            raise ValueError(f"'{form}' and 'arm_ids' go together")
        ids = self.candidate_ids()
        if len(set(ids)) != len(ids):
            raise ValueError("arm ids must be unique within an event")
        if form == "arms" and len({len(a.features) for a in self.arms or []}) != 1:
            raise ValueError("every arm must have the same number of features")
        if form == "shared_f64":  # (arm_features_f64 with its arm ids took the fast path)
            _f64(self.shared_f64 or b"", form)
        return self

    def candidate_ids(self) -> list[str]:
        """The candidate arm ids, in order (none for a slate request)."""
        if self.arms is not None:
            return [a.arm_id for a in self.arms]
        if self.actions is not None:
            return [a.arm_id for a in self.actions]
        return list(self.arm_ids or [])

    def feature_objects(self) -> tuple[list[dict[str, Any]], list[list[dict[str, Any]]]] | None:
        """``(context_features, each action's features)`` of the feature-object form (for the
        bandit's featuriser, docs/features.md), or None for the other forms."""
        if self.actions is None:
            return None
        return list(self.context_features or ()), [a.features for a in self.actions]

    def arm_features(self) -> np.ndarray | None:
        """The per-arm feature matrix (K, d) of ``arms`` or ``arm_features_f64``, or None for
        a shared context, feature objects or a slate request (read-only for the binary
        form)."""
        if self.arms is not None:
            return np.array([a.features for a in self.arms], dtype=np.float64)
        if self.arm_features_f64 is None:
            return None
        return np.frombuffer(self.arm_features_f64, dtype=F64).reshape(len(self.arm_ids or ()), -1)

    def shared_features(self) -> np.ndarray | None:
        """The shared context of ``shared`` or ``shared_f64``, or None."""
        if self.shared is not None:
            return np.asarray(self.shared, dtype=np.float64)
        if self.shared_f64 is None:
            return None
        return np.frombuffer(self.shared_f64, dtype=F64)


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


def decision_encoder(bandit_id: str, calibration: str, policy: str) -> Callable[..., list[bytes]]:
    """A fast encoder of one bandit's :class:`Decision` messages (a batch to JSON bytes).

    Builds the same JSON objects as ``Decision(...).model_dump_json()`` (same fields in the
    same order, same values) by string formatting, without constructing models: about half a
    microsecond per decision instead of three. The bandit's constant fields are escaped once
    and a batch's shared fields (model version, decision time) formatted once.
    ``tests/stream/test_event_schemas.py`` checks the output against the model.

    >>> enc = decision_encoder("shop", "certified", "fliphat")
    >>> raw = enc(["e-1", "e-2"], ["arm-2", "arm-0"], [2, 0], [0.5, 1.0], 3, [4, 4], [17, 18],
    ...           1700000000.25)
    >>> [Decision.model_validate_json(r).arm_id for r in raw], Decision.model_validate_json(
    ...     raw[1]).round
    (['arm-2', 'arm-0'], 18)
    """
    q = _json_str
    head = '{"v":1,"event_id":'
    mid = f',"bandit_id":{q(bandit_id)},"arm_id":'
    tail = f',"calibration":{q(calibration)},"policy":{q(policy)},"decided_at":'

    def encode(
        event_ids: list[str],  # all lists of Python values
        arm_ids: list[str],
        arm_indices: list[int],
        propensities: list[float],
        model_version: int,
        episodes: list[int],
        rounds: list[int],
        decided_at: float,
    ) -> list[bytes]:
        if not np.isfinite(propensities).all() or not np.isfinite(decided_at):
            raise ValueError("a decision's numbers must be finite")
        version = f',"model_version":{int(model_version):d},"episode":'
        end = f"{tail}{float(decided_at)!r}}}"
        # Python ints and floats (``ndarray.tolist()``): numpy scalars would format differently
        return [
            f'{head}{q(e)}{mid}{q(a)},"arm_index":{k:d},"propensity":{p!r}'
            f'{version}{ep:d},"round":{r:d}{end}'.encode()
            for e, a, k, p, ep, r in zip(
                event_ids, arm_ids, arm_indices, propensities, episodes, rounds
            )
        ]

    return encode


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
    event_time: EventTime


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
    event_time: EventTime


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
    """A heartbeat on the feedback topic: its record keeps the bandit's stream clock moving
    when rewards are sparse (pending joins expire on it); ``event_time``, the producer's
    progress, is checked against the event-time bounds and moves no clock."""

    v: Literal[1] = 1
    type: Literal["watermark"]
    bandit_id: Id
    event_time: EventTime


_validate_feedback = Feedback.__pydantic_validator__.validate_json


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
    fb: Feedback = _validate_feedback(raw)  # (model_validate_json without its argument checks)
    return fb


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
