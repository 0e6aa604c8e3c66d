"""The Java client's default partitioner (murmur2 of the key), which both clients use: a key
keeps its partition whichever client wrote it."""

from __future__ import annotations

__all__ = ["murmur2_partition"]


def murmur2_partition(key: bytes, partitions: int) -> int:
    """The index, among ``partitions`` sorted partitions, of ``key``'s partition.

    >>> murmur2_partition(b"shop", 12) == murmur2_partition(b"shop", 12)
    True
    >>> 0 <= murmur2_partition(b"shop", 12) < 12
    True
    """
    from kafka.partitioner.default import murmur2

    return (murmur2(key) & 0x7FFFFFFF) % partitions
