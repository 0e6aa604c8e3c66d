"""Per-episode accumulators of (clipped context, clipped reward) rows, with real forgetting.

Three forms hold what a fit needs (FLIPHAT spec §11, "State"):

``"h"``     h = Σ x·y and a count: all N-IHT needs when M = 1 and θ⁰ = 0 (O(d) memory);
``"gram"``  h and G = Σ x xᵀ: any M, O(d²) memory, constant in the episode length;
``"rows"``  the rows themselves: any M, O(N·d) memory, cheaper than G while N < d/2.

Rows must already be clipped: the accumulator is the private computation's input and has no
bounds of its own. :meth:`EpisodeAccumulator.destroy` overwrites and drops every array, so
forgetting an episode frees its memory (and leaves nothing behind in it).
"""

from __future__ import annotations

import numpy as np

from ..utils.hashing import MultisetDigest

__all__ = ["FORMS", "EpisodeAccumulator"]

FORMS = ("h", "gram", "rows")


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
    def _state(self):
        if not hasattr(self, "_h"):
            if self.form not in FORMS:
                raise ValueError(f"form must be one of {FORMS}, got {self.form!r}")
            self._h = np.zeros(self.d)
            self._G = np.zeros((self.d, self.d)) if self.form == "gram" else None
            self._rows: list[np.ndarray] = []
            self._ys: list[np.ndarray] = []
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

    def learn_many(self, X: np.ndarray, y: np.ndarray, ids=None) -> None:
        """Add rows (already clipped). ``ids`` (optional) feed the consumed-id digest."""
        self._state()
        if self._sealed:
            raise RuntimeError("episode accumulator is sealed; its rows belong to a released fit")
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.d or y.shape != (X.shape[0],):
            raise ValueError(f"expected X of shape (n, {self.d}) and y of shape (n,)")
        if X.shape[0] == 0:
            return
        self._h += X.T @ y
        if self._G is not None:
            self._G += X.T @ X
        if self.form == "rows":
            self._rows.append(X.copy())
            self._ys.append(y.copy())
        self._count += X.shape[0]
        if ids is not None:
            self._digest.add(ids)

    def learn_one(self, x: np.ndarray, y: float, id=None) -> None:
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
    def h(self) -> np.ndarray:
        return self._state()._h

    def rows(self) -> tuple[np.ndarray, np.ndarray]:
        self._state()
        if self.form != "rows":
            raise RuntimeError("rows are only kept in the 'rows' form")
        if not self._rows:
            return np.zeros((0, self.d)), np.zeros(0)
        if len(self._rows) > 1:
            self._rows = [np.concatenate(self._rows)]
            self._ys = [np.concatenate(self._ys)]
        return self._rows[0], self._ys[0]

    def gram_times(self, idx: np.ndarray, vals: np.ndarray) -> np.ndarray:
        """G·θ for a sparse θ (indices ``idx``, values ``vals``): O(d·s) or O(N·d)."""
        self._state()
        if self.form == "gram":
            return self._G[:, idx] @ vals
        if self.form == "rows":
            X, _ = self.rows()
            return X.T @ (X[:, idx] @ vals)
        raise RuntimeError("G·θ needs the 'gram' or 'rows' form (M > 1 or θ⁰ ≠ 0)")

    @property
    def nbytes(self) -> int:
        if not hasattr(self, "_h") or self._h is None:
            return 0
        total = self._h.nbytes + (self._G.nbytes if self._G is not None else 0)
        total += sum(a.nbytes for a in self._rows) + sum(a.nbytes for a in self._ys)
        return total

    # -- forgetting -----------------------------------------------------------------------
    def destroy(self) -> None:
        """Overwrite and drop every array (forgetting, spec §8.1.8)."""
        self._state()
        for arr in [self._h, self._G, *self._rows, *self._ys]:
            if arr is not None:
                arr.fill(0.0)
        self._h = np.zeros(0)
        self._G = None
        self._rows, self._ys = [], []
        self._count = 0
        self._sealed = True

    # -- persistence ----------------------------------------------------------------------
    def state_dict(self) -> dict:
        self._state()
        X, y = self.rows() if self.form == "rows" else (None, None)
        return {
            "d": self.d,
            "form": self.form,
            "h": self._h,
            "G": self._G,
            "X": X,
            "y": y,
            "count": self._count,
            "digest": self._digest.state_dict(),
            "sealed": self._sealed,
        }

    @classmethod
    def from_state_dict(cls, state: dict) -> EpisodeAccumulator:
        acc = cls(d=int(state["d"]), form=state["form"])._state()
        acc._h = np.array(state["h"], dtype=np.float64)
        acc._G = None if state["G"] is None else np.array(state["G"], dtype=np.float64)
        if state.get("X") is not None and len(state["X"]):
            acc._rows = [np.array(state["X"], dtype=np.float64)]
            acc._ys = [np.array(state["y"], dtype=np.float64)]
        acc._count = int(state["count"])
        acc._digest = MultisetDigest().load_state_dict(state["digest"])
        acc._sealed = bool(state["sealed"])
        return acc
