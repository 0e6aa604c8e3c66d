"""Sources of differential-privacy noise.

Every private release draws its noise from a :class:`NoiseSource`. A source holds one secret
master key; each release derives its own independent generator from the key and a *label*
(for example ``("fit", episode, iteration)``), as the FLIPHAT spec §8.1 requires: one stream per
(episode, iteration, purpose), never reused. Because the derivation is deterministic, a release
recomputed after a crash from the same sealed input gives the identical output instead of a
fresh draw, so a crash can never turn one release into two.

The key is drawn from OS entropy unless a seed is injected (tests and simulations). The key is
a secret: it is never part of ``repr``, logs or metrics, only of owner-only snapshots.
"""

from __future__ import annotations

import functools
import hashlib
import secrets

import numpy as np

__all__ = ["NoiseSource", "label_to_int"]


@functools.lru_cache(maxsize=1024)
def _str_label(label: str) -> int:
    return int.from_bytes(hashlib.blake2b(label.encode(), digest_size=8).digest(), "little")


def label_to_int(label: int | str) -> int:
    """Map one label component to a non-negative integer for seed derivation.

    >>> label_to_int(7)
    7
    >>> label_to_int("fit") == label_to_int("fit")
    True
    """
    if isinstance(label, (bool, np.bool_)):
        raise TypeError("labels must be int or str, not bool")
    if isinstance(label, (int, np.integer)):
        if label < 0:
            raise ValueError("integer labels must be non-negative")
        return int(label)
    if isinstance(label, str):
        return _str_label(label)  # cached: labels repeat on every release
    raise TypeError(f"labels must be int or str, got {type(label).__name__}")


class NoiseSource:
    """Secret-keyed factory of independent numpy generators, one per labelled release.

    Parameters
    ----------
    seed
        Master key. ``None`` (the default, and the only sensible production value) draws a
        128-bit key from the operating system's entropy the first time it is needed. An integer
        makes every stream reproducible; use it in tests and simulations only.

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

    def __init__(self, seed: int | None = None):
        self.seed = seed

    # -- key handling ---------------------------------------------------------------------
    def _master(self) -> int:
        key = getattr(self, "_key", None)
        if key is None:
            key = self.seed if self.seed is not None else secrets.randbits(128)
            if key < 0:
                raise ValueError("seed must be non-negative")
            self._key = key
        return key

    def _issued_set(self) -> set:
        issued = getattr(self, "_issued", None)
        if issued is None:
            issued = set()
            self._issued = issued
        return issued

    def generator(self, *labels: int | str, track: bool = True) -> np.random.Generator:
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
        seq = np.random.SeedSequence(
            entropy=self._master(), spawn_key=tuple(label_to_int(lbl) for lbl in labels)
        )
        return np.random.Generator(np.random.PCG64(seq))

    def stream_id(self, *labels: int | str) -> str:
        """A public identifier of a stream (labels only, never the key), for the ledger."""
        return "/".join(str(lbl) for lbl in labels)

    # -- persistence ----------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Secret state: the master key and the labels already issued. Snapshot-only."""
        return {"key": format(self._master(), "x"), "issued": sorted(map(list, self._issued_set()))}

    def load_state_dict(self, state: dict) -> NoiseSource:
        self._key = int(state["key"], 16)
        self._issued = {tuple(x) for x in state.get("issued", [])}
        return self

    def forget_issued(self, *labels: int | str) -> None:
        """Allow one stream to be issued again (crash-retry of a release that was never used)."""
        self._issued_set().discard(tuple(labels))

    def __repr__(self) -> str:
        return "NoiseSource(seed=<secret>)"

    def __getstate__(self):  # pickling for multiprocessing keeps the key; never log the state
        return self.__dict__.copy()
