"""The binary-tree mechanism over packed Gram matrices, padded to exactly m noise terms.

DP-LinUCB spec §5. Rows a_1, a_2, … (‖a‖ ≤ L̃) are counted by s. Level ℓ of the tree holds, while
bit ℓ of s is set, the *node* covering the last completed block of 2^ℓ rows, whose noise is drawn
once, when the block completes, at s_c = s with its bits below ℓ cleared. A release at count s is

    R_s = M_s + Σ_{ℓ: bit ℓ of s set} E_node(ℓ, s_c) + pad,

where M_s = Σ_{t ≤ s} a_t a_tᵀ is the exact prefix (sensitive) and the pad is an independent draw
with the law of (m − popcount(s)) further node noises: **every release contains exactly m i.i.d.
noise terms** (spec §5 "Why padding"), which is what the PSD shifts of spec §4 assume.

Implementation choices (equal in law to the spec's pseudo-code, see docs/dp-linucb.md):

* **Lazy, batched draws.** Noise is drawn only when a release needs it: a node completed and
  retired between two releases is never drawn (its noise would never be used, DESIGN §2), and a
  batch of b rows costs O(1) draws instead of ≈ 2b. A node's noise is still drawn exactly once,
  from the noise stream named by its identity (label…, s_c) — so after a crash it is *regenerated
  identically*, never re-drawn (spec §5 "Noise identity").
* **Issue-once by structure.** Node streams are requested with ``track=False``: a live node
  not yet drawn at a release s always completed after the previous release s′ (it was not live
  at s′), so every draw has s_c > s′, and s′ (``release_s``) is persisted. The check
  ``s_c > s′`` replaces the source's issued-label set, which would otherwise grow by one
  label per release for ever (and be written into every snapshot).
* **Pads per release.** The pads of one release are one draw of the summed law (m − popcount(s)
  terms) from the stream of (label…, s), drawn in one call together with the node completing at
  s (``sampler.sample_pair``: independent pieces of one stream). Pads are independent of
  the data, so drawing them fresh per release costs no privacy; a retired node's noise is never
  reused as a pad (its slot is zeroed).

Secure backend (``noise.backend == "secure"``, docs/privacy/secure-noise.md "Gram tree"). The
exact prefix M is already on the grid 2⁻³² (integer units), so every node sum is too. The node
noises are drawn as exact discrete Gaussians in integer units of a power-of-two grid γ = 2^−g
that divides 2⁻³² (so no value is ever rounded: the sensitivity and ρ are exactly the
continuous calibration's), the release is computed in integers, M·2^(g−32) + Σ noise, and
converted to float once (a function of the integer release alone). Node and pad noise are
held as int64 units; a snapshot stores them, never re-draws them.

Memory: m node matrices + one pad + the exact prefix, each (d+1)(d+2)/2 numbers: O(m·d²).

Spec: docs/specs/dp_linucb_tree.md.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import numpy.typing as npt

from .draw_counter import DrawCounter
from .matrix_noise import SymmetricGaussianNoise, WishartNoise
from .noise import NoiseGenerator, NoiseSource, StreamFamily
from .rows import QBITS, exact_gram_units, units_to_float
from .symmetric import packing

if TYPE_CHECKING:
    from typing import Self

    from .secure_noise import SecureGenerator

__all__ = ["PaddedTree", "tree_levels"]


def _secure(rng: NoiseGenerator) -> SecureGenerator:
    # a stream of a NoiseSource with backend "secure" (the callers check ``self.secure``)
    return cast("SecureGenerator", rng)


def _units_dtype(n_cap: int, row_norm_sq: float) -> type[np.int64] | type[object]:
    """int64 while n_cap·L̃²·2³² < 2⁶³ (about 10⁹ rows for L̃² = 2); exact Python ints beyond."""
    return np.int64 if n_cap * row_norm_sq < 2.0**31 else object


def tree_levels(n_cap: int) -> int:
    """m = ⌈log2(n_cap) + 1⌉ (spec §2), computed exactly for integers.

    >>> tree_levels(1), tree_levels(2), tree_levels(7), tree_levels(8), tree_levels(50_000_000)
    (1, 2, 4, 4, 27)
    """
    if n_cap < 1:
        raise ValueError("n_cap must be >= 1")
    return (n_cap - 1).bit_length() + 1 if n_cap > 1 else 1


class PaddedTree(DrawCounter):
    """Padded binary-counter tree (one epoch) over packed (p × p) Gram matrices.

    Parameters
    ----------
    p
        Row length d + 1.
    n_cap
        Capacity (rows); m = ⌈log2(n_cap) + 1⌉ levels.
    sampler
        Node-noise law (:class:`~.matrix_noise.SymmetricGaussianNoise` or
        :class:`~.matrix_noise.WishartNoise`) with ``sample(rng, terms)``.
    noise
        The :class:`~.noise.NoiseSource` whose streams name every draw.
    label
        Prefix of the noise-stream labels (e.g. ``(bandit, "dp-linucb", "tree", epoch)``).
    row_norm_sq
        L̃², the bound every inserted row satisfies (enforced by the caller's clipping).
    pad
        Pad every release to m noise terms. ``False`` gives the textbook tree and exists only to
        demonstrate in the tests why padding is mandatory (spec §5); never use it.

    Examples
    --------
    >>> import numpy as np
    >>> from streaming_dpbandit.privacy.matrix_noise import SymmetricGaussianNoise
    >>> from streaming_dpbandit.privacy.noise import NoiseSource
    >>> tree = PaddedTree(p=3, n_cap=100, sampler=SymmetricGaussianNoise(3, sigma=1.0),
    ...                   noise=NoiseSource(seed=7), label=("b", "tree", 0), row_norm_sq=2.0)
    >>> tree.m, tree.insert_many(np.array([[1.0, 0.0, 1.0]] * 6))
    (8, 6)
    >>> R = tree.release()            # exact sum of 6 rows + exactly 8 noise terms
    >>> tree.live_levels(), tree.noise_terms()
    ([1, 2], 8)
    >>> bool(np.allclose(R, tree.release()))  # the same release until a row arrives
    True

    """

    # state built by _state() (River style: the constructor only stores parameters)
    _s: int
    _M: npt.NDArray[Any]  # int64, or exact Python ints (object) for very large capacities
    _E: npt.NDArray[Any]  # per-level node noise: float64, or int64 grid units (secure)
    _node_s: list[int]
    _held: int
    _pad: npt.NDArray[Any]
    _pad_terms: int
    _release_s: int
    _noise_sum: npt.NDArray[Any]
    _family: StreamFamily

    def __init__(
        self,
        p: int,
        n_cap: int,
        sampler: SymmetricGaussianNoise | WishartNoise,
        noise: NoiseSource,
        label: tuple[int | str, ...] = ("tree",),
        row_norm_sq: float = 2.0,
        pad: bool = True,
    ):
        self.p = p
        self.n_cap = n_cap
        self.sampler = sampler
        self.noise = noise
        self.label = tuple(label)
        self.row_norm_sq = row_norm_sq
        self.pad = pad

    # -- state ------------------------------------------------------------------------------
    @property
    def m(self) -> int:
        return tree_levels(self.n_cap)

    @property
    def secure(self) -> bool:
        """Whether node noise is exact discrete Gaussian on a grid (the secure backend)."""
        return getattr(self.noise, "backend", "fast") == "secure"

    @property
    def grid_exponent(self) -> int | None:
        """g of the secure node grid γ = 2^−g (``None`` on the fast backend)."""
        return self._grid_sampler.grid_exponent(2 * QBITS) if self.secure else None

    @property
    def _grid_sampler(self) -> SymmetricGaussianNoise:
        # the secure backend's node noise is Gaussian: gram_calibration refuses wishart+secure
        return cast(SymmetricGaussianNoise, self.sampler)

    def _grid_g(self) -> int:
        """g of the secure node grid (secure backend only)."""
        return self._grid_sampler.grid_exponent(2 * QBITS)

    def _state(self) -> Self:
        if not hasattr(self, "_M"):
            P = packing(self.p).size
            ndt = np.int64 if self.secure else np.float64  # secure: int64 units of γ
            self._s = 0
            self._M = np.zeros(P, dtype=_units_dtype(self.n_cap, self.row_norm_sq))
            self._E = np.zeros((self.m, P), dtype=ndt)
            self._node_s = [-1] * self.m  # s_c of the node noise held per level (−1: none)
            self._held = 0  # bit ℓ set iff _node_s[ℓ] ≥ 0
            self._pad = np.zeros(P, dtype=ndt)
            self._pad_terms = 0
            self._release_s = -1
            self._noise_sum = np.zeros(P, dtype=ndt)
            self._draws = {"node": 0, "pad": 0}
        return self

    def _sample(self, g: NoiseGenerator, terms: int = 1) -> npt.NDArray[Any]:
        if self.secure:
            return self._grid_sampler.sample_units(_secure(g), self._grid_g(), terms)
        return self.sampler.sample(g, terms=terms) if terms != 1 else self.sampler.sample(g)

    def _secure_value(self, noise_units: npt.NDArray[Any]) -> npt.NDArray[np.float64]:
        """float(M·2^(g−32) + noise) · 2^−g, the sum in exact integers, rounded once."""
        g = self._grid_g()
        M = self._M.astype(object) * (1 << (g - 2 * QBITS))
        total = M + noise_units.astype(object)
        return np.array([math.ldexp(float(v), -g) for v in total], dtype=np.float64)

    @property
    def s(self) -> int:
        return self._state()._s

    @property
    def full(self) -> bool:
        return self.s >= self.n_cap

    def _held_from_levels(self) -> int:
        """Bit ℓ set iff level ℓ holds a drawn node noise (recomputed from ``_node_s``)."""
        mask = 0
        for ell, held in enumerate(self._node_s):
            if held >= 0:
                mask |= 1 << ell
        return mask

    def live_levels(self) -> list[int]:
        s = self.s
        return [ell for ell in range(self.m) if (s >> ell) & 1]

    def noise_terms(self) -> int:
        """Number of i.i.d. node-noise terms in the current release (m when padded)."""
        self._state()
        live = sum(1 for v in self._node_s if v >= 0)
        return live + self._pad_terms

    # -- inserting --------------------------------------------------------------------------
    def insert_many(self, rows: npt.NDArray[np.float64]) -> int:
        """Add rows (n, p) (clipped, on the 2⁻¹⁶ grid) up to the capacity; return how many."""
        self._state()
        room = self.n_cap - self._s
        n = min(room, int(rows.shape[0]))
        if n <= 0:
            return 0
        units = exact_gram_units(rows[:n], self.row_norm_sq)
        self._M += units if self._M.dtype != object else units.astype(object)
        self._s += n
        return n

    # -- noise ------------------------------------------------------------------------------
    def _stream(self, *labels: int | str) -> NoiseGenerator:
        """The noise stream (label…, *labels), not tracked (issue-once is structural here)."""
        if not self.label:
            return self.noise.generator(*labels, track=False)
        fam: StreamFamily | None = getattr(self, "_family", None)
        if fam is None:
            fam = self._family = self.noise.family(*self.label)
        return fam.generator(*labels)

    def _refresh_noise(self) -> None:
        s = self._s
        if self._release_s == s:
            return
        if s < self._release_s:  # pragma: no cover - s never decreases
            raise RuntimeError("the tree's row count went backwards")
        terms = self.m - s.bit_count() if self.pad else 0
        pad: npt.NDArray[Any] | None = None
        node_s = self._node_s
        stale = self._held & ~s
        while stale:  # retire held nodes whose bit of s is clear: never reuse their noise
            low = stale & -stale  # (not even as a pad)
            ell = low.bit_length() - 1
            self._E[ell] = 0.0
            node_s[ell] = -1
            stale ^= low
        rest = s
        while rest:
            low = rest & -rest  # lowest set bit of what is left: level ℓ = log2(low)
            ell = low.bit_length() - 1
            s_c = (s >> ell) << ell  # the live level-ℓ node completed at s_c
            rest ^= low
            if node_s[ell] != s_c:
                if s_c <= self._release_s:
                    raise RuntimeError(
                        f"tree node completed at {s_c} was not drawn by the release at "
                        f"{self._release_s}: drawing it now would re-draw noise"
                    )
                g = self._stream(s_c)
                if s_c == s and terms > 0:  # the node completing now and the pads: one call
                    pair: tuple[npt.NDArray[Any], npt.NDArray[Any]]
                    if self.secure:
                        pair = self._grid_sampler.sample_pair_units(
                            _secure(g), self._grid_g(), terms
                        )
                    else:
                        pair = self.sampler.sample_pair(g, terms)
                    self._E[ell], pad = pair
                    self._draws["pad"] += 1
                else:
                    self._E[ell] = self._sample(g)
                node_s[ell] = s_c
                self._draws["node"] += 1
        if terms > 0:
            if pad is None:
                # s = 0 (no node completes at 0), or root_value() already drew the node at s
                # s > release_s (checked on entry): the pad stream of s is new
                g_s = self._stream(s, "pad") if s else self._stream(0)
                pad = self._sample(g_s, terms)
                self._draws["pad"] += 1
            self._pad = pad
        else:
            self._pad = np.zeros_like(self._pad)
        self._pad_terms = terms
        self._noise_sum = self._E[: s.bit_length()].sum(axis=0) + self._pad
        self._release_s = s
        self._held = s  # every live level (bit of s) now holds its node; the rest were retired

    def release(self) -> npt.NDArray[np.float64]:
        """The packed release R_s = M_s + (exactly m noise terms); stable until a row arrives."""
        self._state()._refresh_noise()
        if self.secure:
            return self._secure_value(self._noise_sum)
        out: npt.NDArray[np.float64] = units_to_float(self._M) + self._noise_sum
        return out

    def root_value(self) -> npt.NDArray[np.float64]:
        """At s = 2^(m−1) (a full doubling epoch): the root node's release M + E[m−1], no pads.

        This is one tree-node release (spec §7 "Closing an epoch").
        """
        self._state()
        s, top = self._s, self.m - 1
        if s != 1 << top:
            raise RuntimeError("the root node is complete only at s = 2^(m-1)")
        if self._node_s[top] != s:
            if s <= self._release_s:
                raise RuntimeError("the root node was released without its noise")
            g = self._stream(s)
            self._E[top] = self._sample(g)
            self._node_s[top] = s
            self._held |= 1 << top
            self._draws["node"] += 1
        if self.secure:
            return self._secure_value(self._E[top])
        root: npt.NDArray[np.float64] = units_to_float(self._M) + self._E[top]
        return root

    # -- sensitive views (simulation and tests only) -----------------------------------------
    def exact_sum(self) -> npt.NDArray[np.float64]:
        """M_s (SENSITIVE: the exact prefix; never log or export)."""
        return units_to_float(self._state()._M)

    def noise_sum(self) -> npt.NDArray[np.float64]:
        """N_s of the current release (SENSITIVE; simulation diagnostics only)."""
        self._state()._refresh_noise()
        if self.secure:
            gamma: float = 2.0 ** -self._grid_g()
            return self._noise_sum.astype(np.float64) * gamma
        return self._noise_sum.copy()

    # -- persistence ------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Complete state, node noise included (a restart never re-draws it). SENSITIVE."""
        self._state()
        return {
            "s": self._s,
            "M": self._M.copy(),
            "E": self._E.copy(),
            "node_s": np.asarray(self._node_s, dtype=np.int64),
            "pad": self._pad.copy(),
            "pad_terms": self._pad_terms,
            "release_s": self._release_s,
            "draws": dict(self._draws),
        }

    def load_state_dict(self, state: dict[str, Any]) -> PaddedTree:
        self._state()
        self._s = int(state["s"])
        self._M = np.asarray(state["M"], dtype=_units_dtype(self.n_cap, self.row_norm_sq)).copy()
        ndt = np.int64 if self.secure else np.float64
        E, pad = np.asarray(state["E"]), np.asarray(state["pad"])
        drawn_fast = E.dtype.kind == "f" or pad.dtype.kind == "f"
        if self.secure and drawn_fast and (E.any() or pad.any()):
            raise ValueError(
                "this snapshot's tree noise was drawn by the fast backend: a tree epoch cannot "
                "switch to the secure backend mid-way (noise_backend=fast resumes it)"
            )
        self._E = E.astype(ndt).copy()
        self._node_s = [int(v) for v in state["node_s"]]
        self._held = self._held_from_levels()
        self._pad = pad.astype(ndt).copy()
        self._pad_terms = int(state["pad_terms"])
        self._release_s = int(state["release_s"])
        self._draws = dict(state["draws"])
        self._noise_sum = self._E.sum(axis=0) + self._pad
        return self

    @property
    def nbytes(self) -> int:
        """Bytes of the tree's arrays (O(m·d²))."""
        self._state()
        return int(
            self._M.nbytes + self._E.nbytes + self._pad.nbytes + self._noise_sum.nbytes
        ) + 8 * len(self._node_s)
