"""Sources of differential-privacy noise.

Every private release draws its noise from a :class:`NoiseSource`. A source holds one secret
master key; each release derives its own independent generator from the key and a *label*
(for example ``("fit", episode, iteration)``), as the FLIPHAT spec §8.1 requires: one stream per
(episode, iteration, purpose), never reused. Because the derivation is deterministic, a release
recomputed after a crash from the same sealed input gives the identical output instead of a
fresh draw, so a crash can never turn one release into two.

The key is drawn from OS entropy unless a seed is injected (tests and simulations). The key is
a secret: it is never part of ``repr``, logs or metrics, only of owner-only snapshots.

Derivation: the 256-bit PCG64 seed of stream ``labels`` is keyed BLAKE2b (the master key as the
MAC key) of an injective encoding of the labels, extended in counter mode if a bit generator
asks for more words. A keyed hash is a pseudo-random function: streams of distinct labels are
independent, and an output reveals nothing about the key or other streams. It costs about
3 µs per stream (numpy's ``SeedSequence`` + ``PCG64`` took about 17 µs, which mattered for
DP-LinUCB, one stream per release).

Spec: docs/specs/fliphat.md.
"""

from __future__ import annotations

import functools
import hashlib
import secrets
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt
from numpy.random.bit_generator import ISeedSequence
from numpy.typing import DTypeLike

from .secure_noise import SecureGenerator

#: What a noise stream is: a numpy generator (``backend="fast"``) or a
#: :class:`~.secure_noise.SecureGenerator` (``backend="secure"``, which raises on samplers it
#: does not implement exactly).
NoiseGenerator: TypeAlias = np.random.Generator | SecureGenerator

__all__ = ["NoiseGenerator", "NoiseSource", "StreamFamily", "numpy_stream", "secure_stream"]


def numpy_stream(g: NoiseGenerator) -> np.random.Generator:
    """``g`` as a fast-backend (numpy) stream; a secure stream here is a wiring error.

    >>> numpy_stream(np.random.default_rng(0)).random() < 1
    True
    """
    if not isinstance(g, np.random.Generator):
        raise TypeError("a float sampler was handed a secure noise stream")
    return g


def secure_stream(g: NoiseGenerator) -> SecureGenerator:
    """``g`` as a secure-backend stream; a numpy stream here is a wiring error."""
    if not isinstance(g, SecureGenerator):
        raise TypeError("an exact sampler was handed a floating-point noise stream")
    return g


@functools.lru_cache(maxsize=1024)
def _encode_str(label: str) -> bytes:
    b = label.encode()
    return b"s" + len(b).to_bytes(4, "little") + b


def _encode_labels(labels: tuple[int | str, ...]) -> bytes:
    """Injective byte encoding of a label tuple (type tag + length + bytes per label)."""
    parts = []
    for lbl in labels:
        if isinstance(lbl, str):
            parts.append(_encode_str(lbl))
        elif isinstance(lbl, (int, np.integer)) and not isinstance(lbl, (bool, np.bool_)):
            v = int(lbl)
            if v < 0:
                raise ValueError("integer labels must be non-negative")
            n = (v.bit_length() + 7) // 8 or 1
            parts.append(b"i" + n.to_bytes(4, "little") + v.to_bytes(n, "little"))
        elif isinstance(lbl, (bool, np.bool_)):
            raise TypeError("labels must be int or str, not bool")
        else:
            raise TypeError(f"labels must be int or str, got {type(lbl).__name__}")
    return b"".join(parts)


def _mac_key(master: int) -> bytes:
    """The BLAKE2b key (≤ 64 bytes) of a master key of any size."""
    raw = master.to_bytes((master.bit_length() + 7) // 8 or 1, "little")
    return raw if len(raw) <= 64 else hashlib.blake2b(raw).digest()


_WORD_TYPES = {
    np.dtype(np.uint32): "<u4",
    np.dtype(np.uint64): "<u8",
    np.uint32: "<u4",
    np.uint64: "<u8",
}
_BLOCK0 = (0).to_bytes(8, "little")


class _KeyedSeed(ISeedSequence):
    """Seed words of one stream: BLAKE2b(key, labels ‖ block), blocks of 32 bytes."""

    __slots__ = ("_key", "_msg")

    def __init__(self, key: bytes, msg: bytes):
        self._key = key
        self._msg = msg

    def generate_state(self, n_words: int, dtype: DTypeLike = np.uint32) -> npt.NDArray[Any]:
        code = _WORD_TYPES.get(dtype) or _WORD_TYPES.get(np.dtype(dtype))
        if code is None:
            raise ValueError("only uint32 and uint64 seed words are supported")
        need = n_words * (4 if code == "<u4" else 8)
        key, msg = self._key, self._msg
        if need <= 32:  # PCG64's 256-bit seed: one block
            raw = hashlib.blake2b(msg + _BLOCK0, key=key, digest_size=32).digest()
        else:
            raw = b"".join(
                hashlib.blake2b(msg + i.to_bytes(8, "little"), key=key, digest_size=32).digest()
                for i in range(-(-need // 32))
            )
        return np.frombuffer(raw, dtype=code, count=n_words).astype(dtype)


class StreamFamily:
    """Streams of one :class:`NoiseSource` sharing an encoded label prefix (``family``)."""

    __slots__ = ("_prefix", "_source")

    def __init__(self, source: NoiseSource, prefix: bytes):
        self._source = source
        self._prefix = prefix

    def generator(self, *labels: int | str) -> NoiseGenerator:
        """The stream of prefix + ``labels`` (untracked: see ``NoiseSource.family``)."""
        return self._source._stream(self._prefix + _encode_labels(labels))

    def __repr__(self) -> str:
        return "StreamFamily(<secret>)"


class NoiseSource:
    """Secret-keyed factory of independent numpy generators, one per labelled release.

    Parameters
    ----------
    seed
        Master key. ``None`` (the default, and the only sensible production value) draws a
        128-bit key from the operating system's entropy the first time it is needed. An integer
        makes every stream reproducible; use it in tests and simulations only.
    backend
        ``"fast"`` (numpy PCG64 streams, floating-point samplers) or ``"secure"`` (exact
        discrete Laplace/Gaussian noise on a public grid from a keyed SHAKE-256 stream:
        :class:`~.secure_noise.SecureGenerator`, ``docs/privacy/secure-noise.md``). Both derive
        every stream from the key and its labels, so a recomputed release is bit-identical.

    Examples
    --------
    >>> src = NoiseSource(seed=42)
    >>> a = src.generator("fit", 3).laplace(size=2)
    >>> b = NoiseSource(seed=42).generator("fit", 3).laplace(size=2)
    >>> bool((a == b).all())
    True
    >>> src.generator("fit", 3)
    Traceback (most recent call last):
    ...
    RuntimeError: noise stream ('fit', 3) was already issued by this source; ...
    >>> repr(src)
    'NoiseSource(seed=<secret>)'

    """

    def __init__(self, seed: int | None = None, backend: str = "fast"):
        self.seed = seed
        self.backend = backend

    def _stream(self, msg: bytes) -> NoiseGenerator:
        if self.backend == "fast":
            # numpy's stubs omit ISeedSequence, which BitGenerator accepts (numpy docs)
            seed = _KeyedSeed(self._mac(), msg)
            return np.random.Generator(np.random.PCG64(seed))  # type: ignore[arg-type]
        if self.backend == "secure":
            seed_words = _KeyedSeed(self._mac(), b"\x00secure" + msg).generate_state(8, np.uint32)
            return SecureGenerator(seed_words.tobytes())
        raise ValueError(f"noise backend must be 'fast' or 'secure', got {self.backend!r}")

    # -- key handling ---------------------------------------------------------------------
    def _master(self) -> int:
        key = getattr(self, "_key", None)
        if key is None:
            key = self.seed if self.seed is not None else secrets.randbits(128)
            if key < 0:
                raise ValueError("seed must be non-negative")
            self._key = key
        return key

    def _mac(self) -> bytes:
        mac = getattr(self, "_mac_bytes", None)
        if mac is None or mac[0] != self._master():
            mac = (self._master(), _mac_key(self._master()))
            self._mac_bytes = mac
        return mac[1]

    def _issued_set(self) -> set[tuple[int | str, ...]]:
        issued = getattr(self, "_issued", None)
        if issued is None:
            issued = set()
            self._issued = issued
        return issued

    def generator(self, *labels: int | str, track: bool = True) -> NoiseGenerator:
        """Return the generator of the stream named by ``labels``.

        Each label tuple may be issued once per source object: asking twice means a release
        is about to reuse noise, which is a bug (spec §8.1.2). After a restart the source is
        rebuilt from the snapshot and the same label yields the same stream again, on purpose.

        ``track=False`` skips the issued-set bookkeeping (which grows with every label and is
        part of the snapshot). Only for callers that enforce issue-once structurally with O(1)
        persisted state, e.g. the DP-matroid batch means, whose label (item, batch index) is
        issued exactly when the item's persisted batch counter advances past it.
        """
        if not labels:
            raise ValueError("a noise stream needs at least one label")
        if track:
            key = tuple(labels)
            issued = self._issued_set()
            if key in issued:
                raise RuntimeError(
                    f"noise stream {key!r} was already issued by this source; "
                    "reusing noise would break the privacy guarantee"
                )
            issued.add(key)
        return self._stream(_encode_labels(labels))

    def family(self, *prefix: int | str) -> StreamFamily:
        """The streams whose labels start with ``prefix``, with the prefix encoded once.

        ``family(*p).generator(*q)`` is the stream ``generator(*p, *q, track=False)`` (the
        label encoding is self-delimiting, so the concatenation is the tuple's encoding).
        For callers that enforce issue-once structurally (see ``track``), e.g. the padded tree,
        whose node labels (…, s_c) are issued only once s_c exceeds its persisted release count.

        >>> src = NoiseSource(seed=4)
        >>> a = src.family("tree", 0).generator(8).standard_normal(3)
        >>> b = src.generator("tree", 0, 8, track=False).standard_normal(3)
        >>> bool((a == b).all())
        True
        """
        if not prefix:
            raise ValueError("a stream family needs at least one prefix label")
        return StreamFamily(self, _encode_labels(prefix))

    def stream_id(self, *labels: int | str) -> str:
        """A public identifier of a stream (labels only, never the key), for the ledger."""
        return "/".join(str(lbl) for lbl in labels)

    # -- persistence ----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Secret state: the master key and the labels already issued. Snapshot-only."""
        return {
            "key": format(self._master(), "x"),
            "issued": sorted(map(list, self._issued_set())),
            "backend": self.backend,
        }

    def load_state_dict(self, state: dict[str, Any]) -> NoiseSource:
        """Restore the key and issued labels. The backend stays the configured one: it is
        public configuration, each release records its own, and switching it between releases
        (e.g. a snapshot written before ``serve`` defaulted to ``secure``) costs no privacy."""
        self._key = int(state["key"], 16)
        self._issued = {tuple(x) for x in state.get("issued", [])}
        return self

    def __repr__(self) -> str:
        if self.backend == "fast":
            return "NoiseSource(seed=<secret>)"
        return f"NoiseSource(seed=<secret>, backend={self.backend!r})"

    def __getstate__(
        self,
    ) -> dict[str, Any]:  # pickling for multiprocessing keeps the key; never log the state
        return self.__dict__.copy()
