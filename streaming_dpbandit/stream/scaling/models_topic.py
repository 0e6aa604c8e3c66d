"""The compacted ``models`` topic of a model broadcast (docs/scaling.md, pattern 2).

The learner publishes every released model of a bandit as one record keyed by the bandit id;
compaction keeps the latest per bandit. Decision replicas read it with a reader assigned to
every partition (no group: each replica reads everything), ``read_committed``.

A record holds released — already private — values only: the policy's
:meth:`~streaming_dpbandit.policies.base.Policy.released_model` payload, which equals the
``release`` field of the ledger records it names. Broadcasting it is post-processing and costs
no privacy budget. Statistics, counts, noise state and seeds never go there.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ...policies.base import Policy
from ...settings import KafkaSettings
from ..kafka.seam import KafkaClient, kafka_client

__all__ = ["ModelMessage", "ModelsReader", "ensure_models_topic", "model_message"]

log = logging.getLogger("streaming_dpbandit.broadcast")

Id = Annotated[str, Field(min_length=1, max_length=200)]


class ModelMessage(BaseModel):
    """One released model on the models topic (key = ``bandit_id``).

    >>> m = ModelMessage(bandit_id="shop", model_version=3, episode=3, policy="fliphat",
    ...                  calibration="certified", model={"indices": [1], "values": [0.5]},
    ...                  release_ids=["shop/fliphat/fit/episode=3"], published_at=1.0)
    >>> ModelMessage.model_validate_json(m.model_dump_json()) == m
    True
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    v: Literal[1] = 1
    bandit_id: Id
    model_version: int = Field(ge=1)
    episode: int = Field(ge=0, description="the episode whose decisions this model is for")
    policy: str
    calibration: str
    model: dict = Field(description="the policy's released payload, nothing else")
    release_ids: list[str] = Field(min_length=1, description="ledger records it came from")
    published_at: float

    def released_model(self) -> dict:
        """The argument of :meth:`Policy.load_released_model`."""
        return {
            "model_version": self.model_version,
            "release_ids": list(self.release_ids),
            "payload": self.model,
        }


def model_message(bandit_id: str, policy: Policy, now: float | None = None) -> ModelMessage | None:
    """The message for the model in force of ``policy`` (``None`` before its first release).

    >>> import numpy as np
    >>> from streaming_dpbandit.policies import FLIPHAT
    >>> pol = FLIPHAT(d=4, s=1, delta=0.01, first_episode_len=1, bandit_id="shop", seed=1)
    >>> _ = pol.decide(np.ones((1, 2, 4))); _ = pol.refit()
    >>> msg = model_message("shop", pol, now=0.0)
    >>> msg.model_version, sorted(msg.model), msg.release_ids
    (1, ['indices', 'values'], ['shop/fliphat/fit/episode=1'])
    """
    released = policy.released_model()
    if released is None:
        return None
    return ModelMessage(
        bandit_id=bandit_id,
        model_version=released["model_version"],
        episode=released["model_version"],
        policy=policy.name,
        calibration=getattr(policy, "calibration", "non-private"),
        model=released["payload"],
        release_ids=released["release_ids"],
        published_at=time.time() if now is None else now,
    )


def ensure_models_topic(
    settings: KafkaSettings, topic: str, client: KafkaClient | None = None
) -> bool:
    """Create the compacted models topic if it does not exist; True if created."""
    from ..kafka.compacted import ensure_compacted_topic

    return ensure_compacted_topic(settings, topic, settings.partitions, client)


class ModelsReader:
    """Follows the models topic: the latest valid model per bandit.

    Parameters
    ----------
    settings
        The ``kafka`` section (client, bootstrap servers, security).
    topic
        The models topic.
    on_bad
        ``on_bad(partition, offset, raw, reason, detail)`` for a record that is not a valid
        :class:`ModelMessage` (the caller dead-letters it).
    client
        The client library (default: the one the settings name).
    """

    def __init__(
        self,
        settings: KafkaSettings,
        topic: str,
        on_bad: Callable[[int, int, bytes, str, str], None] | None = None,
        client: KafkaClient | None = None,
    ):
        self.settings = settings
        self.topic = topic
        self.on_bad = on_bad
        self.client = client or kafka_client(settings.client)

    def open(self, timeout_s: float = 30.0) -> ModelsReader:
        """Assign every partition, read from the beginning (:meth:`catch_up` next)."""
        self.reader = self.client.reader(self.settings, read_committed=True)
        parts = self.reader.partitions(self.topic, timeout_s)
        if not parts:
            self.reader.close()
            raise RuntimeError(f"models topic {self.topic!r} does not exist")
        self.parts = [(self.topic, p) for p in parts]
        self.reader.assign(self.parts)
        return self

    def catch_up(self) -> dict[str, ModelMessage]:
        """Read up to the topic's current end; the latest model per bandit."""
        out: dict[str, ModelMessage] = {}
        self.reader.read_to_end(self.parts, lambda rec: self._read(out, rec))
        return out

    def poll(self, timeout_s: float = 0.0) -> dict[str, ModelMessage]:
        """Models that arrived since the last call (latest per bandit; may be empty)."""
        out: dict[str, ModelMessage] = {}
        for rec in self.reader.poll(timeout_s):
            self._read(out, rec)
        return out

    def _read(self, into: dict[str, ModelMessage], rec) -> None:
        if rec.value is None:  # a tombstone: nothing to serve from
            return
        try:
            msg = ModelMessage.model_validate_json(rec.value)
        except ValidationError as err:
            if self.on_bad is not None:
                self.on_bad(rec.partition, rec.offset, rec.value, "invalid_model", str(err))
            return
        self._merge(into, {msg.bandit_id: msg})

    @staticmethod
    def _merge(into: dict[str, ModelMessage], new: dict[str, ModelMessage]) -> None:
        for b, msg in new.items():
            old = into.get(b)
            if old is None or msg.model_version > old.model_version:
                into[b] = msg

    def close(self) -> None:
        self.reader.close()
