"""Vectorised 64-bit hashing: event-id digests and deterministic, non-private coins.

Decisions must be reproducible from (state, event_id) so that an event re-processed after a
crash gets the same decision (DESIGN §4). Tie-breaks therefore do not draw from a stateful
generator: they hash (tie key, event id) with SplitMix64 into a uniform number. The tie key is
public-grade randomness (a non-private coin, FLIPHAT spec §3.4), kept apart from DP noise.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import numpy.typing as npt

from .arrays import ArrayLike, FloatArray

_U64Array = npt.NDArray[np.uint64]

__all__ = ["MultisetDigest", "hash_ids", "splitmix64", "uniform_coins"]

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def splitmix64(x: ArrayLike) -> _U64Array:
    """SplitMix64 finaliser applied elementwise to a uint64 array.

    >>> int(splitmix64(np.array([0], dtype=np.uint64))[0])
    16294208416658607535
    """
    z = np.asarray(x, dtype=np.uint64) + _GOLDEN
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def hash_ids(ids: ArrayLike) -> _U64Array:
    """Hash event ids (non-negative integers or strings) to uint64, deterministically.

    Integers are mixed with SplitMix64 (vectorised); strings with BLAKE2b.

    >>> bool(hash_ids(["a", "a"])[0] == hash_ids(["a"])[0])
    True
    >>> hash_ids(np.array([1, 2])).dtype
    dtype('uint64')
    """
    arr = np.asarray(ids)
    if arr.dtype.kind in "iu":
        if arr.dtype.kind == "i" and arr.size and arr.min() < 0:
            raise ValueError("integer ids must be non-negative")
        return splitmix64(arr.astype(np.uint64))
    out = np.empty(arr.shape, dtype=np.uint64)
    flat = out.reshape(-1)
    for i, v in enumerate(arr.reshape(-1).tolist()):
        flat[i] = int.from_bytes(hashlib.blake2b(str(v).encode(), digest_size=8).digest(), "little")
    return out


def uniform_coins(key: int, ids: ArrayLike) -> FloatArray:
    """Uniform [0, 1) numbers, one per id, determined by (key, id) only.

    >>> u = uniform_coins(7, np.arange(1, 6))
    >>> bool(((u >= 0) & (u < 1)).all()), bool((u == uniform_coins(7, np.arange(1, 6))).all())
    (True, True)
    """
    h = hash_ids(ids) ^ splitmix64(np.array([key & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64))
    h = splitmix64(h)
    return (h >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


class MultisetDigest:
    """Order-independent digest of a multiset of ids: count plus sum of hashes mod 2⁶⁴.

    Two fits' digests expose whether a decision id was consumed twice without storing ids.

    >>> a = MultisetDigest(); a.add([3, 1, 2]); b = MultisetDigest(); b.add([1, 2]); b.add([3])
    >>> a.hexdigest() == b.hexdigest(), a.count
    (True, 3)
    """

    def __init__(self) -> None:
        self.count = 0
        self.total = 0

    def add(self, ids: ArrayLike) -> None:
        h = hash_ids(ids)
        self.count += int(h.size)
        self.total = (self.total + int(np.sum(h, dtype=np.uint64))) & 0xFFFFFFFFFFFFFFFF

    def hexdigest(self) -> str:
        return f"{self.count:x}-{self.total:016x}"

    def state_dict(self) -> dict[str, Any]:
        return {"count": self.count, "total": self.total}

    def load_state_dict(self, state: dict[str, Any]) -> MultisetDigest:
        self.count = int(state["count"])
        self.total = int(state["total"])
        return self
