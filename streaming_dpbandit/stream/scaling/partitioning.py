"""Which partition a bandit lives in, and co-partitioning of the input topics.

Scaling by Kafka (docs/scaling.md): contexts and feedback are keyed by ``bandit_id`` and the two
topics have the same number of partitions, so bandit b's contexts and feedback are both in
partition p(b) = murmur2(b) mod P (Kafka's default partitioner). A *task* is a partition index:
the bandits that hash to it plus the two input partitions of that index. A replica that owns a
task owns exactly those bandits.
"""

from __future__ import annotations

__all__ = ["partition_of", "task_of_tp", "tasks_for"]


def partition_of(bandit_id: str, partitions: int) -> int:
    """Kafka's default partition of key ``bandit_id`` among ``partitions``.

    >>> partition_of("shop", 12) == partition_of("shop", 12)
    True
    >>> 0 <= partition_of("shop", 12) < 12
    True
    """
    from ..kafka.partitioner import murmur2_partition

    return murmur2_partition(bandit_id.encode(), partitions)


def task_of_tp(tp: tuple[str, int]) -> int:
    """The task (partition index) an input partition belongs to."""
    return int(tp[1])


def tasks_for(bandit_ids, partitions: int) -> dict[int, list[str]]:
    """Bandits grouped by their task.

    >>> sorted(sum(tasks_for(["a", "b", "c"], 4).values(), []))
    ['a', 'b', 'c']
    """
    out: dict[int, list[str]] = {}
    for b in bandit_ids:
        out.setdefault(partition_of(b, partitions), []).append(b)
    return out
