"""Per-episode accumulators of (clipped context, clipped reward) rows, with real forgetting.

Three forms hold what a fit needs (FLIPHAT spec §11, "State"):

``"h"``     h = Σ x·y and a count: all N-IHT needs when M = 1 and θ⁰ = 0 (O(d) memory);
``"gram"``  h and G = Σ x xᵀ: any M, O(d²) memory, constant in the episode length;
``"rows"``  the rows themselves: any M, O(N·d) memory, cheaper than G while N < d/2.

Rows must already be clipped: the accumulator is the private computation's input and has no
bounds of its own. :meth:`EpisodeAccumulator.destroy` overwrites and drops every array, so
forgetting an episode frees its memory (and leaves nothing behind in it).

Exact, order-independent sums. Every value is rounded to the grid 2⁻¹⁶ (``quantize``) and the
sums are kept as integers in units of 2⁻³², so h and G are *exact* sums of the quantised rows:
the same rows give bit-identical statistics in any order and any micro-batching. This is what
lets a service that crashed and re-consumed its input recompute a sealed episode's release
bit for bit (and recognise it in the ledger) instead of producing a near-copy. Products are
formed on chunks small enough that every partial sum is exactly representable in float64
(|partial sum| < 2²¹ in units of 2⁻³² resolution), then added as Python integers; being exact,
they do not depend on the order of the additions: h = Xᵀy by ``np.einsum`` (no BLAS call, so no
BLAS worker thread spinning on a second core after it), G = XᵀX by BLAS.
Callers that need a bound B on a value must clip to ``grid_floor(B)`` so rounding cannot cross it.

Spec: docs/specs/fliphat.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Final

import numpy as np

from ..utils.arrays import AnyArray, ArrayLike, FloatArray, IntArray
from ..utils.hashing import MultisetDigest

__all__ = ["FORMS", "EpisodeAccumulator", "grid_floor", "quantize"]

FORMS = ("h", "gram", "rows")
QBITS: Final = 16
_GRID = 2.0**-QBITS
_MAGIC = 1.5 * 2.0 ** (52 - QBITS)  # x + M − M rounds x to the 2⁻¹⁶ grid (|x| < 2³⁵)
_UNIT = 2.0 ** (2 * QBITS)  # products of two grid values are integers in units of 2⁻³²
_EXACT = 2.0 ** (52 - 2 * QBITS)  # partial sums below this stay exact in float64


def quantize(a: ArrayLike, out: FloatArray | None = None) -> FloatArray:
    """Round to the nearest multiple of 2⁻¹⁶ (into ``out``, which may be ``a`` itself).

    Values must be below 2³⁴ in magnitude (callers clip far below that).

    >>> quantize([0.1, -1.0, 3.0]).tolist() == [6554 / 65536, -1.0, 3.0]
    True
    """
    if out is None:  # the copy and the first addition in one pass
        out = np.add(np.asarray(a, dtype=np.float64), _MAGIC)
    else:
        if out is not a:
            np.copyto(out, a)
        out += _MAGIC
    out -= _MAGIC
    return out


def grid_floor(bound: float) -> float:
    """The largest grid point ≤ ``bound``: clip to it, then quantising cannot exceed ``bound``.

    >>> grid_floor(1.0), grid_floor(0.1) <= 0.1
    (1.0, True)
    """
    return math.floor(bound * 2**QBITS) / 2**QBITS


def _exact_matmul(A: FloatArray, B: FloatArray, amax: float, bmax: float) -> IntArray:
    """Aᵀ·B as int64 units of 2⁻³², exact: grid inputs, chunks with exactly representable sums."""
    n = A.shape[0]
    per_row = max(amax * bmax, _GRID * _GRID)
    chunk = max(1, int(_EXACT // per_row))
    out: IntArray | None = None
    for i in range(0, n, chunk):
        if B.ndim == 1:  # h = Xᵀy: numpy's own loop, no BLAS call (no BLAS thread to wake)
            prod = np.einsum("ij,i->j", A[i : i + chunk], B[i : i + chunk])
        else:
            prod = A[i : i + chunk].T @ B[i : i + chunk]
        part = (prod * _UNIT).astype(np.int64)
        out = part if out is None else out + part
    if out is None:  # callers return before multiplying zero rows
        raise ValueError("no rows to multiply")
    return out


class EpisodeAccumulator:
    """Sufficient statistics (or rows) of one episode.

    Parameters
    ----------
    d
        Context dimension.
    form
        ``"h"``, ``"gram"`` or ``"rows"``.

    Examples
    --------
    >>> import numpy as np
    >>> acc = EpisodeAccumulator(d=3, form="gram")
    >>> acc.learn_many(np.eye(3), np.array([1.0, 2.0, 3.0]), ids=[1, 2, 3])
    >>> acc.h.tolist(), acc.count
    ([1.0, 2.0, 3.0], 3)
    >>> acc.gram_times(np.array([0, 2]), np.array([1.0, 1.0])).tolist()
    [1.0, 0.0, 1.0]
    >>> acc.destroy(); acc.count, acc.nbytes
    (0, 0)

    """

    def __init__(self, d: int, form: str = "h"):
        self.d = d
        self.form = form

    # -- lazily created state -------------------------------------------------------------
    def _state(self) -> EpisodeAccumulator:
        if not hasattr(self, "_h"):
            if self.form not in FORMS:
                raise ValueError(f"form must be one of {FORMS}, got {self.form!r}")
            self._h: AnyArray = np.zeros(self.d, dtype=object)  # exact sums, units of 2⁻³²
            self._G: AnyArray | None = (
                np.zeros((self.d, self.d), dtype=object) if self.form == "gram" else None
            )
            self._rows: list[FloatArray] = []
            self._ys: list[FloatArray] = []
            self._count = 0
            self._digest = MultisetDigest()
            self._sealed = False
        return self

    @property
    def count(self) -> int:
        return self._state()._count

    @property
    def sealed(self) -> bool:
        return self._state()._sealed

    @property
    def digest(self) -> MultisetDigest:
        return self._state()._digest

    def learn_many(
        self,
        X: ArrayLike,
        y: ArrayLike,
        ids: Sequence[Any] | AnyArray | None = None,
        owned: bool = False,
        bounds: tuple[float, float] | None = None,
    ) -> None:
        """Add rows (already clipped). ``ids`` (optional) feed the consumed-id digest.

        ``owned=True`` lets the accumulator round ``X`` and ``y`` in place (the caller hands
        over float64 buffers it will not use again); ``bounds=(max|x|, max|y|)`` passes bounds the
        caller already enforced, so the hot path does not scan the rows again.
        """
        self._state()
        if self._sealed:
            raise RuntimeError("episode accumulator is sealed; its rows belong to a released fit")
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.d or y.shape != (X.shape[0],):
            raise ValueError(f"expected X of shape (n, {self.d}) and y of shape (n,)")
        if X.shape[0] == 0:
            return
        if bounds is None:
            xmax = float(max(-X.min(), X.max()))
            ymax = float(max(-y.min(), y.max()))
            if not (xmax < 2.0**34 and ymax < 2.0**34):  # also false for NaN
                raise ValueError("values must be finite and clipped before accumulation")
        else:
            xmax, ymax = bounds
        X = quantize(X, X if owned and X.flags.writeable else None)
        y = quantize(y, y if owned and y.flags.writeable else None)
        xmax, ymax = xmax + _GRID, ymax + _GRID  # rounding moves a value by at most 2⁻¹⁷
        self._h = self._h + _exact_matmul(X, y, xmax, ymax).astype(object)
        if self._G is not None:
            self._G = self._G + _exact_matmul(X, X, xmax, xmax).astype(object)
        if self.form == "rows":
            self._rows.append(X.copy())
            self._ys.append(y.copy())
        self._count += X.shape[0]
        if ids is not None:
            self._digest.add(ids)

    def learn_one(self, x: ArrayLike, y: float, id: Any = None) -> None:
        self.learn_many(
            np.asarray(x, dtype=np.float64)[None, :],
            np.array([y], dtype=float),
            None if id is None else [id],
        )

    def seal(self) -> EpisodeAccumulator:
        """Freeze the accumulator: no row may be added after its fit was computed."""
        self._state()._sealed = True
        return self

    # -- what a fit reads -----------------------------------------------------------------
    @property
    def h(self) -> FloatArray:
        """h = Σ x·y (float64, from the exact integer sum)."""
        return np.array(self._state()._h, dtype=np.float64) / _UNIT

    @property
    def G(self) -> FloatArray:
        self._state()
        if self._G is None:
            raise RuntimeError("G is only kept in the 'gram' form")
        return np.array(self._G, dtype=np.float64) / _UNIT

    def rows(self) -> tuple[FloatArray, FloatArray]:
        self._state()
        if self.form != "rows":
            raise RuntimeError("rows are only kept in the 'rows' form")
        if not self._rows:
            return np.zeros((0, self.d)), np.zeros(0)
        if len(self._rows) > 1:
            self._rows = [np.concatenate(self._rows)]
            self._ys = [np.concatenate(self._ys)]
        return self._rows[0], self._ys[0]

    def gram_times(self, idx: IntArray, vals: FloatArray) -> FloatArray:
        """G·θ for a sparse θ (indices ``idx``, values ``vals``): O(d·s) or O(N·d)."""
        self._state()
        if self.form == "gram":
            return self.G[:, idx] @ vals
        if self.form == "rows":
            X, _ = self.rows()
            return X.T @ (X[:, idx] @ vals)
        raise RuntimeError("G·θ needs the 'gram' or 'rows' form (M > 1 or θ⁰ ≠ 0)")

    @property
    def nbytes(self) -> int:
        """Approximate memory held (integer sums counted at 32 bytes each)."""
        if not hasattr(self, "_h") or self._h is None:
            return 0
        total = 32 * (self._h.size + (self._G.size if self._G is not None else 0))
        total += sum(a.nbytes for a in self._rows) + sum(a.nbytes for a in self._ys)
        return total

    # -- forgetting -----------------------------------------------------------------------
    def destroy(self) -> None:
        """Overwrite and drop every array (forgetting, spec §8.1.8)."""
        self._state()
        for arr in [self._h, self._G, *self._rows, *self._ys]:
            if arr is not None:
                arr.fill(0)
        self._h = np.zeros(0, dtype=object)
        self._G = None
        self._rows, self._ys = [], []
        self._count = 0
        self._sealed = True

    # -- persistence ----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        self._state()
        X, y = self.rows() if self.form == "rows" else (None, None)
        return {
            "d": self.d,
            "form": self.form,
            "h": [int(v) for v in self._h],
            "G": None if self._G is None else [[int(v) for v in row] for row in self._G],
            "X": X,
            "y": y,
            "count": self._count,
            "digest": self._digest.state_dict(),
            "sealed": self._sealed,
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> EpisodeAccumulator:
        acc = cls(d=int(state["d"]), form=state["form"])._state()
        acc._h = _int_array(state["h"])
        acc._G = None if state["G"] is None else _int_array(state["G"])
        if state.get("X") is not None and len(state["X"]):
            acc._rows = [np.array(state["X"], dtype=np.float64)]
            acc._ys = [np.array(state["y"], dtype=np.float64)]
        acc._count = int(state["count"])
        acc._digest = MultisetDigest().load_state_dict(state["digest"])
        acc._sealed = bool(state["sealed"])
        return acc


def _int_array(values: ArrayLike) -> AnyArray:
    arr = np.empty(np.shape(values), dtype=object)
    arr[...] = np.vectorize(int, otypes=[object])(np.asarray(values, dtype=object))
    return arr
