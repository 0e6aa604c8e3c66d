"""The secure noise backend: exact discrete Laplace and Gaussian noise on a public grid.

Floating-point Laplace and Gaussian samplers leak through the low-order bits of their output
(Mironov, CCS 2012): the set of floats ``x + noise`` can reach depends on ``x``. This backend
releases values on a public grid instead, with noise drawn *exactly* from the discrete
distributions, so no output bit depends on anything but the grid release:

* **grid** — for noise scale b (Laplace scale, or Gaussian σ) the grid is γ = 2^(⌊log₂ b⌋ − 30),
  a public power of two with b/γ ∈ [2³⁰, 2³¹);
* **value** — the value to protect is rounded to the grid, R = rint(x/γ) (exact: γ is a power of
  two);
* **noise** — Z ~ DLap(b/γ) (pmf ∝ exp(−|z|γ/b)) or Z ~ N_ℤ(0, (b/γ)²) (pmf ∝ exp(−z²γ²/2b²)),
  sampled exactly with Canonne, Kamath and Steinke's algorithms (NeurIPS 2020, Algorithms 1–3)
  in integer arithmetic;
* **release** — fl(R + Z)·γ: a function of the integer R + Z alone (the float rounding of a large
  sum is post-processing), on the grid γ.

Privacy (derivation: ``docs/privacy/secure-noise.md``): rounding moves each coordinate by at most
γ/2, so neighbouring R differ by at most Δ/γ + 1 per coordinate; the discrete Laplace mechanism is
then (ε + n·γ/b)-DP for ε = Δ₁/b over n coordinates, the discrete Gaussian ρ-zCDP with
√(2ρ) ≤ (Δ₂ + √n·γ)/σ (CKS Thm 14/15; their multivariate correction is below e^(−2⁶⁰)). With
γ/b ≤ 2⁻³⁰ the extra terms are at most n·2⁻³⁰ in ε and a relative √n·2⁻³⁰/√(2ρ) in √(2ρ).

Randomness: each stream's bits are the SHAKE-256 output of a 32-byte stream seed (keyed
BLAKE2b of the master key and the labels, as for the fast backend) and a block counter — a
keyed extendable-output function from the standard library (OpenSSL), so a release recomputed
after a crash from the same labels is bit-identical. OpenDP's audited samplers cannot be used
for that: they draw from OpenDP's own unseedable CSPRNG (``opendp._data.fill_bytes``), so a
re-processed episode would get fresh noise.

Provided: ``laplace`` and ``normal`` with the value to protect as ``loc``
(``rng.laplace(x, b)``, not ``x + rng.laplace(0, b)``: adding grid noise to an off-grid value in
floating point would leak the value's low bits); ``normal_units`` (exact N_ℤ draws as integer
grid units, for mechanisms that add them to exact integer sums themselves: the Gram tree, the
Gram releases, the factorisation steps); exact ``bernoulli`` and ``logistic_coins``, a
``sign_symmetric_normal`` base law and ``permutation`` (data-independent randomness of the
ℓ2-ball and SVT). Every other sampler raises, so a mechanism not migrated to this interface
fails loudly instead of silently using floating-point noise.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable
from fractions import Fraction
from typing import NoReturn, cast, overload

import numpy as np
import numpy.typing as npt

__all__ = [
    "GRID_BITS",
    "GRID_MARGIN",
    "SecureGenerator",
    "discrete_gaussian",
    "discrete_laplace",
    "grid_of",
]

#: b/γ ∈ [2^GRID_BITS, 2^(GRID_BITS+1)) for noise scale b and grid γ.
GRID_BITS = 30
#: γ/b ≤ 2⁻³⁰: rounding a value to the grid moves a neighbour's integer release by at most one
#: more unit, i.e. raises a per-coordinate sensitivity by at most this many noise scales. Secure
#: Laplace-type calibrations (Peeling, SVT, batch means) take it out of their budget
#: (docs/privacy/secure-noise.md, "Privacy").
GRID_MARGIN = 2.0**-GRID_BITS
_BLOCK = 4096


def grid_of(scale: float) -> float:
    """The public grid γ = 2^(⌊log₂ scale⌋ − 30) of noise with scale ``scale`` (> 0).

    >>> grid_of(1.0) == 2.0**-30, grid_of(3.0) == 2.0**-29
    (True, True)
    """
    if not (scale > 0 and math.isfinite(scale)):
        raise ValueError("the noise scale must be positive and finite")
    return math.ldexp(1.0, math.frexp(scale)[1] - 1 - GRID_BITS)


class _Bits:
    """Exact uniform integers from SHAKE-256(seed ‖ block counter), 64-bit words at a time."""

    __slots__ = ("_block", "_i", "_seed", "_words")

    def __init__(self, seed: bytes):
        self._seed = seed
        self._block = 0
        self._words: list[int] = []
        self._i = 0

    def _word(self) -> int:
        if self._i == len(self._words):
            blk = self._seed + self._block.to_bytes(8, "little")
            raw = hashlib.shake_256(blk).digest(_BLOCK)
            self._words = np.frombuffer(raw, dtype="<u8").tolist()
            self._block += 1
            self._i = 0
        w = self._words[self._i]
        self._i += 1
        return w

    def below(self, m: int) -> int:
        """Uniform on {0, …, m − 1}, by rejection on the top k = ⌈log₂ m⌉ bits (exact)."""
        if m == 1:
            return 0
        k = (m - 1).bit_length()
        if k <= 64:
            shift = 64 - k
            while True:
                v = self._word() >> shift
                if v < m:
                    return v
        words = -(-k // 64)
        shift = 64 * words - k
        while True:
            v = 0
            for _ in range(words):
                v = (v << 64) | self._word()
            v >>= shift
            if v < m:
                return v


_TWO64 = 1 << 64


def _bernoulli(bits: _Bits, num: int, den: int) -> bool:
    """Bernoulli(num/den), 0 ≤ num ≤ den: is U < num/den for U uniform in [0, 1)?

    Compares U's base-2⁶⁴ digits (one random word each) with those of num/den, lazily: the
    first differing digit decides, so P[True] = num/den exactly, with one word and one integer
    division almost always (a tie continues, probability 2⁻⁶⁴) — instead of rejection sampling
    a uniform integer below den, which took ⌈log₂ den / 64⌉ words per try (several for the
    discrete Gaussian's ~150-bit denominators) and up to two tries.
    """
    if num <= 0:
        return False
    r = num
    while True:
        digit, r = divmod(r * _TWO64, den)
        w = bits._word()
        if w != digit:
            return w < digit


def _bernoulli_exp1(bits: _Bits, num: int, den: int) -> bool:
    """Bernoulli(exp(−num/den)) for 0 ≤ num/den ≤ 1 (CKS Algorithm 1)."""
    k = 1
    while _bernoulli(bits, num, den * k):
        k += 1
    return k % 2 == 1


def _bernoulli_exp(bits: _Bits, num: int, den: int) -> bool:
    """Bernoulli(exp(−num/den)) for num/den ≥ 0."""
    whole, rest = divmod(num, den)
    for _ in range(whole):
        if not _bernoulli_exp1(bits, 1, 1):
            return False
    return _bernoulli_exp1(bits, rest, den)


def _dlaplace(bits: _Bits, t: int, s: int) -> int:
    """One draw of DLap(t/s): P[Z = z] ∝ exp(−|z|·s/t) (CKS Algorithm 2)."""
    while True:
        u = bits.below(t)
        if not _bernoulli_exp(bits, u, t):
            continue
        v = 0
        while _bernoulli_exp1(bits, 1, 1):
            v += 1
        y = (u + t * v) // s
        if bits.below(2):
            if y == 0:
                continue
            return -y
        return y


def _dgauss(bits: _Bits, sigma2: Fraction) -> int:
    """One draw of N_ℤ(0, σ²): P[Z = z] ∝ exp(−z²/2σ²) (CKS Algorithm 3)."""
    t = math.isqrt(sigma2.numerator // sigma2.denominator) + 1  # ⌊σ⌋ + 1
    s2n, s2d = sigma2.numerator, sigma2.denominator
    while True:
        y = _dlaplace(bits, t, 1)
        # C ~ Bernoulli(exp(−(|y| − σ²/t)² / 2σ²)), the exponent as one fraction num/den
        a = abs(y) * t * s2d - s2n  # (|y| − σ²/t)·t·s2d
        num = a * a * s2d
        den = 2 * s2n * (t * s2d) ** 2
        if _bernoulli_exp(bits, num, den):
            return y


def discrete_laplace(bits: _Bits, scale: Fraction, n: int) -> npt.NDArray[np.float64]:
    """n i.i.d. draws of DLap(scale) (scale a positive rational), as float64 integers."""
    t, s = scale.numerator, scale.denominator
    return np.array([_dlaplace(bits, t, s) for _ in range(n)], dtype=np.float64)


def discrete_gaussian(bits: _Bits, sigma: Fraction, n: int) -> npt.NDArray[np.float64]:
    """n i.i.d. draws of N_ℤ(0, σ²) (σ a positive rational), as float64 integers."""
    sigma2 = sigma * sigma
    return np.array([_dgauss(bits, sigma2) for _ in range(n)], dtype=np.float64)


class SecureGenerator:
    """The secure counterpart of a noise stream: grid-valued ``laplace`` and ``normal``.

    Built by :meth:`~.noise.NoiseSource.generator` when the source's backend is ``"secure"``.

    Examples
    --------
    >>> g = SecureGenerator(bytes(32))
    >>> out = g.laplace(np.array([0.3, 10.0]), 1.0)
    >>> gamma = grid_of(1.0)
    >>> bool(np.all(out / gamma == np.rint(out / gamma)))  # on the public grid
    True
    >>> bool(np.array_equal(out, SecureGenerator(bytes(32)).laplace(np.array([0.3, 10.0]), 1.0)))
    True
    >>> SecureGenerator(bytes(32)).standard_normal(3)
    Traceback (most recent call last):
    ...
    NotImplementedError: the secure noise backend has no standard_normal(): ...
    """

    backend = "secure"

    def __init__(self, seed: bytes):
        self._bits = _Bits(seed)

    def _release(
        self,
        loc: npt.ArrayLike,
        scale: float,
        size: int | tuple[int, ...] | None,
        draw: Callable[[_Bits, Fraction, int], npt.NDArray[np.float64]],
    ) -> npt.NDArray[np.float64] | float:
        scale = float(scale)
        gamma = grid_of(scale)
        loc_arr = np.asarray(loc, dtype=np.float64)
        shape = loc_arr.shape if size is None else (size if isinstance(size, tuple) else (size,))
        if size is not None:
            loc_arr = np.broadcast_to(loc_arr, shape)
        if not np.all(np.isfinite(loc_arr)):
            raise ValueError("the value to protect must be finite")
        n = int(np.prod(shape)) if shape else 1
        rational = Fraction(scale) / Fraction(gamma)  # exact: both are floats
        z = draw(self._bits, rational, n).reshape(shape)
        out = (np.rint(loc_arr / gamma) + z) * gamma
        if out.shape == () and size is None and np.ndim(loc) == 0:
            return float(out)
        return out

    @overload
    def laplace(self, loc: float = 0.0, scale: float = 1.0, size: None = None) -> float: ...
    @overload
    def laplace(
        self,
        loc: npt.ArrayLike = 0.0,
        scale: float = 1.0,
        size: int | tuple[int, ...] | None = None,
    ) -> npt.NDArray[np.float64]: ...
    def laplace(
        self,
        loc: npt.ArrayLike = 0.0,
        scale: float = 1.0,
        size: int | tuple[int, ...] | None = None,
    ) -> npt.NDArray[np.float64] | float:
        """``loc`` rounded to the grid γ of ``scale`` plus γ·DLap(scale/γ)."""
        return self._release(loc, scale, size, discrete_laplace)

    @overload
    def normal(self, loc: float = 0.0, scale: float = 1.0, size: None = None) -> float: ...
    @overload
    def normal(
        self,
        loc: npt.ArrayLike = 0.0,
        scale: float = 1.0,
        size: int | tuple[int, ...] | None = None,
    ) -> npt.NDArray[np.float64]: ...
    def normal(
        self,
        loc: npt.ArrayLike = 0.0,
        scale: float = 1.0,
        size: int | tuple[int, ...] | None = None,
    ) -> npt.NDArray[np.float64] | float:
        """``loc`` rounded to the grid γ of ``scale`` plus γ·N_ℤ(0, (scale/γ)²)."""
        return self._release(loc, scale, size, discrete_gaussian)

    @overload
    def normal_units(self, sigma2_units: Fraction | float, size: int) -> npt.NDArray[np.int64]: ...
    @overload
    def normal_units(
        self, sigma2_units: Iterable[Fraction | float], size: None = None
    ) -> npt.NDArray[np.int64]: ...
    def normal_units(
        self, sigma2_units: Fraction | float | Iterable[Fraction | float], size: int | None = None
    ) -> npt.NDArray[np.int64]:
        """Exact N_ℤ(0, σ²) draws as int64 *grid units*, σ² an exact rational.

        For mechanisms that keep their value exactly on a grid (integer units) and add the
        noise in integers themselves, so that no floating-point sum ever mixes the value with
        the noise (the Gram tree of DP-LinUCB, ``docs/privacy/secure-noise.md``).
        ``sigma2_units`` is σ² in grid units (a :class:`~fractions.Fraction` or exact float):
        one value and a ``size``, or a sequence of per-entry variances (one draw each).

        >>> z = SecureGenerator(bytes(32)).normal_units(Fraction(2**62), 3)
        >>> z.dtype, z.shape
        (dtype('int64'), (3,))
        >>> SecureGenerator(bytes(32)).normal_units([Fraction(2**62)] * 3).tolist() == z.tolist()
        True
        """
        # the overloads pair one variance with a size and a sequence with size=None
        values = cast(
            "Iterable[Fraction | float]",
            [sigma2_units] * size if size is not None else sigma2_units,
        )
        out = []
        for v in values:
            sigma2 = v if isinstance(v, Fraction) else Fraction(v)
            if not sigma2 > 0:
                raise ValueError("the noise variance must be positive")
            if sigma2 > 2**100:  # callers add up to 64 draws in int64: keep 2⁶³ ≥ 40σ·64 away
                raise ValueError("σ too large for int64 grid units (> 2^50)")
            out.append(_dgauss(self._bits, sigma2))
        return np.array(out, dtype=np.int64)

    def bernoulli(self, p: npt.ArrayLike | Fraction, n: int) -> npt.NDArray[np.bool_]:
        """n exact Bernoulli(p) coins, p a float in [0, 1] taken as its exact rational value
        (or a :class:`~fractions.Fraction`); one p, or an array of n.

        >>> SecureGenerator(bytes(32)).bernoulli(np.array([0.0, 1.0, 1.0]), 3).tolist()
        [False, True, True]
        """
        ps = np.broadcast_to(np.asarray(p, dtype=object), (n,))
        out = np.empty(n, dtype=bool)
        for i, pi in enumerate(ps):
            f = pi if isinstance(pi, Fraction) else Fraction(float(pi))
            if not 0 <= f <= 1:
                raise ValueError("a probability must lie in [0, 1]")
            out[i] = _bernoulli(self._bits, f.numerator, f.denominator)
        return out

    def logistic_coins(self, epsilon: float, n: int) -> npt.NDArray[np.bool_]:
        """n exact Bernoulli(1/(1 + e^ε)) coins (ε ≥ 0 a float, taken exactly).

        With a = e^−ε: per round, a fair coin; heads → output 1 with probability a (else
        retry), tails → output 0; so P[1] = (a/2)/(a/2 + 1/2) = a/(1 + a) = 1/(1 + e^ε),
        using CKS's exact Bernoulli(e^−γ).

        >>> c = SecureGenerator(bytes(32)).logistic_coins(1.0, 20_000)
        >>> bool(abs(c.mean() - 1 / (1 + np.e)) < 4 * (0.27 * 0.73 / 20_000) ** 0.5)
        True
        """
        f = Fraction(float(epsilon))
        if f < 0:
            raise ValueError("epsilon must be non-negative")
        out = np.empty(n, dtype=bool)
        bits = self._bits
        for i in range(n):
            while True:
                if bits.below(2):
                    if _bernoulli_exp(bits, f.numerator, f.denominator):
                        out[i] = True
                        break
                else:
                    out[i] = False
                    break
        return out

    def sign_symmetric_normal(self, shape: int | tuple[int, ...]) -> npt.NDArray[np.float64]:
        """Approximately N(0, 1) floats whose law is *exactly* invariant under x → −x.

        A *base measure* for data-independent directions (the ℓ2-ball mechanism's output
        sphere), never noise added to data: magnitudes |N(0, 1)| from a numpy generator seeded
        by this stream, each times an exact fair sign bit from this stream. The ℓ2-ball
        mechanism's privacy needs only the exact symmetry, not the exact normal law.

        >>> z = SecureGenerator(bytes(32)).sign_symmetric_normal((2, 3)); z.shape
        (2, 3)
        """
        shape = shape if isinstance(shape, tuple) else (shape,)
        seed = np.array([self._bits._word() for _ in range(4)], dtype=np.uint64)
        mag = np.abs(np.random.Generator(np.random.PCG64(seed)).standard_normal(shape))
        n = int(np.prod(shape))
        signs = np.empty(n, dtype=np.float64)
        for i in range(0, n, 64):  # 64 sign bits per word
            w = self._bits._word()
            for j in range(min(64, n - i)):
                signs[i + j] = -1.0 if (w >> j) & 1 else 1.0
        return mag * signs.reshape(shape)

    def permutation(self, n: int) -> npt.NDArray[np.int64]:
        """A uniform permutation of range(n) (Fisher–Yates on exact uniform integers).

        Data-independent randomness (e.g. SVT's query order); provided so that a mechanism on
        the secure backend draws everything from its one keyed stream.

        >>> sorted(SecureGenerator(bytes(32)).permutation(5).tolist())
        [0, 1, 2, 3, 4]
        """
        out = np.arange(n)
        for i in range(n - 1, 0, -1):
            j = self._bits.below(i + 1)
            out[i], out[j] = out[j], out[i]
        return out

    def __getattr__(self, name: str) -> NoReturn:
        if name.startswith("_"):
            raise AttributeError(name)
        raise NotImplementedError(
            f"the secure noise backend has no {name}(): the mechanism calling it is not "
            "migrated to grid-valued noise (docs/privacy/secure-noise.md lists the ones that "
            "are); use noise_backend='fast' for it"
        )

    def __repr__(self) -> str:
        return "SecureGenerator(<secret>)"
