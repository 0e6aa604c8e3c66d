"""The graphic matroid: items are the edges of a multigraph, independent sets are forests.

Spec: docs/specs/dp_matroid.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .base import Matroid

__all__ = ["GraphicMatroid"]


class _ForestBuilder:
    """Union–find with path halving and union by size: near O(1) per ``can_add``/``add``."""

    __slots__ = ("edges", "parent", "size", "weight")

    def __init__(self, edges: list[tuple[int, int]], n_vertices: int):
        self.edges = edges
        self.parent = list(range(n_vertices))
        self.weight = [1] * n_vertices
        self.size = 0

    def _find(self, v: int) -> int:
        p = self.parent
        while p[v] != v:
            p[v] = p[p[v]]
            v = p[v]
        return v

    def can_add(self, e: int) -> bool:
        u, v = self.edges[e]
        return self._find(u) != self._find(v)

    def add(self, e: int) -> None:
        u, v = self.edges[e]
        ru, rv = self._find(u), self._find(v)
        if self.weight[ru] < self.weight[rv]:
            ru, rv = rv, ru
        self.parent[rv] = ru
        self.weight[ru] += self.weight[rv]
        self.size += 1


class GraphicMatroid(Matroid):
    """Edges of a multigraph; a set of edges is independent iff it contains no cycle (spec §4.2).

    The rank is |V| − (number of connected components); self-loops (u, u) are the matroid's
    loops; parallel edges are parallel elements. ``can_add`` is near O(1) (union–find).

    Parameters
    ----------
    edges
        Item e is the edge ``edges[e] = (u, v)`` between vertices in 0..n_vertices−1.
    n_vertices
        Number of vertices (default: 1 + the largest vertex index).
    expected_rank
        Optional assertion on the computed rank.

    Examples
    --------
    >>> m = GraphicMatroid([(0, 1), (1, 2), (0, 2), (2, 2), (2, 3)])
    >>> m.rank, sorted(m.loops)
    (3, [3])
    >>> m.is_independent([0, 1, 4]), m.is_independent([0, 1, 2])
    (True, False)

    """

    kind = "graphic"

    def __init__(
        self,
        edges: Sequence[Sequence[int]],
        n_vertices: int | None = None,
        expected_rank: int | None = None,
    ):
        pairs = []
        for e in edges:
            if len(e) != 2:
                raise ValueError("every edge must be a pair (u, v)")
            u, v = int(e[0]), int(e[1])
            if u < 0 or v < 0:
                raise ValueError("vertex indices must be >= 0")
            pairs.append((u, v))
        if not pairs:
            raise ValueError("a graphic matroid needs at least one edge")
        top = 1 + max(max(p) for p in pairs)
        if n_vertices is None:
            n_vertices = top
        elif n_vertices < top:
            raise ValueError(f"edges use vertex {top - 1} but n_vertices = {n_vertices}")
        self.edges = pairs
        self.n_vertices = int(n_vertices)
        self.n_items = len(pairs)
        self._finish(expected_rank)

    def _rank_and_loops(self) -> tuple[int, set[int]]:
        b = self.builder()
        for e in range(self.n_items):
            if b.can_add(e):
                b.add(e)
        return b.size, {e for e, (u, v) in enumerate(self.edges) if u == v}

    def builder(self) -> _ForestBuilder:
        return _ForestBuilder(self.edges, self.n_vertices)

    def describe(self) -> dict[str, Any]:
        return {
            "type": self.kind,
            "edges": [list(p) for p in self.edges],
            "n_vertices": self.n_vertices,
        }
