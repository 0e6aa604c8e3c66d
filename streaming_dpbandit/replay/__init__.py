"""Offline replay of logged streams (DESIGN §1, job 3; ``docs/replay.md``).

Readers turn logs — the service's own topics (JSONL files, Kafka ranges), CSV/Parquet files with
a column mapping, the Open Bandit Dataset — into bounded chunks of :class:`LoggedBatch`; the
replay method (:class:`ReplayMethod`) evaluates learning policies on uniform logs; IPS, SNIPS,
DM and DR (:mod:`.ope`) evaluate frozen policies with normal and bootstrap intervals;
:func:`replay_log` runs them all in one pass and reports the privacy each policy's releases
would have spent (:class:`InMemoryLedger`, composed by the product's accountant).

Nothing here imports Kafka at module level (the Kafka reader imports it when it connects).
"""

from .batch import LoggedBatch
from .build import action_table, make_reader
from .errors import LogFormatError
from .evaluate import PolicySpec, replay_log
from .ledger import InMemoryLedger
from .offpolicy import OffPolicyEvaluator
from .replay_method import ReplayMethod
from .result import ReplayResult
from .reward_model import RidgeRewardModel

__all__ = [
    "InMemoryLedger",
    "LogFormatError",
    "LoggedBatch",
    "OffPolicyEvaluator",
    "PolicySpec",
    "ReplayMethod",
    "ReplayResult",
    "RidgeRewardModel",
    "action_table",
    "make_reader",
    "replay_log",
]
