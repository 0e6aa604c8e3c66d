"""Binary-mechanism tree over a stream of matrix leaves (PrivateLASSO spec M4).

Leaves j = 1, 2, … are inserted in order. Inserting leaf j closes the dyadic node
(j − 2^i, j] with i = the number of trailing zero bits of j; the node's exact sum gets fresh noise
from ``node_noise(j)`` once, and the noisy value is kept (persisted in the state, never
redrawn). prefix(j) is the sum of the popcount(j) closed noisy nodes of j's binary
decomposition. With 2^ℓ leaves every leaf lies in at most ℓ + 1 nodes, so a per-node Gaussian
release of cost ρ_node gives every leaf at most (ℓ + 1)·ρ_node (spec: ρ_tree,slot = m_ℓ·L̃⁴/(2σ²)).

Exact sums. Leaves may be exact integer arrays (object dtype, in units of ``unit``) — then node
sums are exact and a restored tree reproduces its releases bit for bit — or floats.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from typing import Self

__all__ = ["TreeAggregator"]


class TreeAggregator:
    """Prefix sums of a leaf stream with noise on O(log n) dyadic nodes.

    Parameters
    ----------
    shape
        Shape of every leaf.
    node_noise
        ``node_noise(j)`` returns the noise of the node closed by leaf j (same shape). It must
        derive a fresh, never-reused stream per j (for example from a keyed :class:`NoiseSource`).
        ``None`` when ``node_release`` is given (it is then never called).
    unit
        Real value of one unit of the (exact integer) leaves; 1.0 for float leaves.
    node_release
        Optional ``node_release(j, exact)``: the noisy release of the node closed by leaf j
        from its exact sum (in leaf units). Replaces ``exact·unit + node_noise(j)`` for the
        secure backend, which must add grid noise to the exact integer sum itself
        (:func:`~.gram.secure_sym_gauss_release`); it must derive a fresh stream per j.

    Examples
    --------
    >>> import numpy as np
    >>> tree = TreeAggregator((1,), node_noise=lambda j: np.zeros(1))
    >>> for v in [1.0, 2.0, 3.0, 4.0, 5.0]:
    ...     tree.insert(np.array([v]))
    >>> tree.count, tree.live_nodes, tree.prefix().tolist()
    (5, 2, [15.0])

    """

    def __init__(
        self,
        shape: tuple[int, ...],
        node_noise: Callable[[int], npt.ArrayLike] | None,
        unit: float = 1.0,
        node_release: Callable[[int, npt.NDArray[Any]], npt.ArrayLike] | None = None,
    ):
        self.shape = tuple(shape)
        self.node_noise = node_noise
        self.unit = unit
        self.node_release = node_release

    def _state(self) -> Self:
        if not hasattr(self, "_count"):
            self._count = 0
            # exact sums of the open partial nodes, one per level
            self._exact: list[npt.NDArray[Any] | None] = []
            # noisy value of the closed node at each level (or None)
            self._noisy: list[npt.NDArray[np.float64] | None] = []
        return self

    @property
    def count(self) -> int:
        """Leaves inserted so far (j)."""
        return self._state()._count

    @property
    def live_nodes(self) -> int:
        """Closed noisy nodes making up prefix(j): popcount(j)."""
        return sum(v is not None for v in self._state()._noisy)

    def insert(self, leaf: npt.ArrayLike) -> None:
        """Insert the next leaf and close the node it completes (drawing that node's noise)."""
        self._state()
        leaf_arr = np.asarray(leaf)
        if leaf_arr.shape != self.shape:
            raise ValueError(f"leaf must have shape {self.shape}, got {leaf_arr.shape}")
        j = self._count + 1
        i = (j & -j).bit_length() - 1  # trailing zeros of j: the level of the node j closes
        while len(self._exact) <= i:
            self._exact.append(None)
            self._noisy.append(None)
        total = leaf_arr
        for k in range(i):
            exact_k = self._exact[k]
            if exact_k is not None:
                total = total + exact_k
            self._exact[k] = None
            self._noisy[k] = None
        self._exact[i] = total
        if self.node_release is not None:
            self._noisy[i] = np.asarray(self.node_release(j, total), dtype=np.float64)
        else:
            real = np.asarray(total, dtype=np.float64) * self.unit
            # without node_release the caller gives node_noise (class docstring)
            node_noise = cast("Callable[[int], npt.ArrayLike]", self.node_noise)
            self._noisy[i] = real + np.asarray(node_noise(j), dtype=np.float64)
        self._count = j

    def prefix(self) -> npt.NDArray[np.float64]:
        """Noisy sum of all inserted leaves: Σ of the popcount(j) live nodes."""
        self._state()
        out: npt.NDArray[np.float64] = np.zeros(self.shape)
        for v in self._noisy:
            if v is not None:
                out = out + v
        return out

    def exact_prefix(self) -> npt.NDArray[np.float64]:
        """Exact (secret) sum of the inserted leaves, for tests and simulation diagnostics."""
        self._state()
        out: npt.NDArray[np.float64] = np.zeros(self.shape)
        for i, v in enumerate(self._noisy):
            if v is not None:
                out = out + np.asarray(self._exact[i], dtype=np.float64) * self.unit
        return out

    # -- persistence ---------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        self._state()
        return {
            "count": self._count,
            "exact": [None if v is None else np.asarray(v) for v in self._exact],
            "noisy": [None if v is None else np.asarray(v) for v in self._noisy],
        }

    def load_state_dict(self, state: dict[str, Any]) -> TreeAggregator:
        self._state()
        self._count = int(state["count"])
        self._exact = [None if v is None else _restore(v) for v in state["exact"]]
        self._noisy = [
            None if v is None else np.asarray(v, dtype=np.float64) for v in state["noisy"]
        ]
        return self


def _restore(v: npt.ArrayLike) -> npt.NDArray[Any]:
    arr = np.asarray(v)
    if arr.dtype == object:
        out = np.empty(arr.shape, dtype=object)
        out[...] = np.vectorize(int, otypes=[object])(arr) if arr.size else arr
        return out
    return arr.copy()
