"""Matroids for slates (DP-matroid spec §4): uniform, partition, graphic and linear matroids with
an incremental independence oracle, the greedy basis algorithm, and loop detection.

A slate is a basis: a maximal independent set, always of the matroid's rank K. Items that can
never be in a basis are exactly the loops (spec §4.4), computed at construction.

Spec: docs/specs/dp_matroid.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import IndependentSetBuilder, Matroid
from .graphic import GraphicMatroid
from .greedy import all_bases, greedy_basis, greedy_many
from .linear import LinearMatroid
from .partition import PartitionMatroid
from .uniform import UniformMatroid

__all__ = [
    "KINDS",
    "GraphicMatroid",
    "IndependentSetBuilder",
    "LinearMatroid",
    "Matroid",
    "PartitionMatroid",
    "UniformMatroid",
    "all_bases",
    "from_description",
    "greedy_basis",
    "greedy_many",
]

#: Matroid classes by ``describe()["type"]``.
KINDS: dict[str, type[Matroid]] = {
    cls.kind: cls for cls in (UniformMatroid, PartitionMatroid, GraphicMatroid, LinearMatroid)
}


def from_description(desc: Matroid | Mapping[str, Any]) -> Matroid:
    """Build a matroid from ``describe()``-style data (or return a matroid unchanged).

    >>> from_description({"type": "uniform", "n_items": 10, "k": 3}).rank
    3
    >>> m = from_description({"type": "linear", "vectors": [[1, 0], [0, 0]]})
    >>> m.rank, sorted(m.loops)
    (1, [1])
    """
    if isinstance(desc, Matroid):
        return desc
    data = dict(desc)
    kind = data.pop("type", None)
    cls = KINDS.get(kind)
    if cls is None:
        raise ValueError(f"unknown matroid type {kind!r}; choose from {', '.join(sorted(KINDS))}")
    try:
        return cls(**data)
    except TypeError as err:
        raise ValueError(f"invalid {kind} matroid description: {err}") from None
