"""User-level contribution bounding (issue 22 §2; derivation: ``docs/privacy/user-level.md``).

Events may carry a ``user_id``. The id is hashed on arrival with a keyed hash (BLAKE2b with a
secret 128-bit key, a pseudo-random function): only the 64-bit keyed hash is ever stored —
in memory and in the owner-only snapshot —, never the id in clear, and neither the key nor a
hash appears in logs, metrics, decisions or the ledger (a broadcast's decision replicas send
the hash to the learner in their decisions: ``docs/scaling.md``).

Per *window* (the policy's data slice: a FLIPHAT episode, or the whole run for a policy whose
releases all read one growing data set) at most ``max_contributions_per_user`` = k events of one
user are *admitted* into the private statistics; the user's further events of that window are
still decided but not learned from, and counted as ``bounded``. With ``max_releases_per_user``
= E, a user is admitted into at most E windows; afterwards none of their events is learned from.

The admission decision is a function of the sequence of (hashed user, window) pairs and of the
window closures only — never of a context or a reward — so two streams that differ only in the
contents of one user's events are bounded identically, which is what the derivation needs.

Memory (bounded, documented in ``docs/privacy/user-level.md``): one dict entry per
(open window, admitted user) — freed when the window closes (:meth:`close_below`) — plus, with
E set, one entry per user ever admitted. Both are capped at ``max_users`` entries per table;
a user who would need a new entry beyond the cap is not learned from (counted as
``bounded_capacity``): dropping more rows never weakens the guarantee. About 100 bytes per entry
in CPython (a 1-million-user table is about 100 MB).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["UserContributionBound"]

COUNTERS = (
    "admitted",
    "bounded",
    "bounded_contributions",
    "bounded_releases",
    "bounded_capacity",
    "bounded_closed",
)


class UserContributionBound:
    """Admit at most k events per user per window and at most E windows per user.

    Parameters
    ----------
    max_contributions_per_user
        k ≥ 1: events of one user admitted per window.
    max_releases_per_user
        E ≥ 1: windows a user is admitted into over the whole run; ``None`` = no limit (the
        whole-run guarantee then grows with the number of windows a user reaches).
    max_users
        Cap on the entries of each counter table (see the module docstring).
    seed
        Key of the keyed hash. ``None`` (production) draws 128 bits from the OS on first use;
        an integer gives a reproducible key (tests, simulations). The key is a secret.

    Examples
    --------
    >>> import numpy as np
    >>> ub = UserContributionBound(max_contributions_per_user=2, max_releases_per_user=2, seed=0)
    >>> users = ub.hash_users(["ann", "ann", "ann", "bob"])
    >>> ub.admit(users, np.array([0, 0, 0, 0])).tolist()   # ann's third event is bounded
    [True, True, False, True]
    >>> ub.admit(ub.hash_users(["ann"]), np.array([1])).tolist()   # her second window
    [True]
    >>> ub.admit(ub.hash_users(["ann"]), np.array([2])).tolist()   # E = 2 windows spent
    [False]
    >>> ub.close_below(2)                                  # windows 0 and 1 are freed
    >>> ub.admit(ub.hash_users(["bob"]), np.array([1])).tolist()   # too late for window 1
    [False]
    >>> {k: ub.counters[k] for k in ("admitted", "bounded")}
    {'admitted': 4, 'bounded': 3}
    """

    _hash_template: hashlib.blake2b | None

    def __init__(
        self,
        max_contributions_per_user: int,
        max_releases_per_user: int | None = None,
        max_users: int = 1_000_000,
        seed: int | None = None,
    ):
        self.max_contributions_per_user = max_contributions_per_user
        self.max_releases_per_user = max_releases_per_user
        self.max_users = max_users
        self.seed = seed

    # -- state ------------------------------------------------------------------------------
    def _validate(self) -> None:
        k, e = self.max_contributions_per_user, self.max_releases_per_user
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"max_contributions_per_user must be an integer ≥ 1, got {k!r}")
        if e is not None and (isinstance(e, bool) or not isinstance(e, (int, np.integer)) or e < 1):
            raise ValueError(f"max_releases_per_user must be an integer ≥ 1 or None, got {e!r}")
        if int(self.max_users) < 1:
            raise ValueError("max_users must be ≥ 1")

    def _init(self) -> None:
        if getattr(self, "_windows", None) is not None:
            return
        self._validate()
        self._windows: dict[int, dict[int, int]] = {}
        self._releases: dict[int, int] = {}
        self._closed_below = 0
        self.counters = dict.fromkeys(COUNTERS, 0)

    def _mac_key(self) -> bytes:
        key = getattr(self, "_key", None)
        if key is None:
            if self.seed is None:
                key = secrets.token_bytes(16)
            else:
                s = int(self.seed)
                if s < 0:
                    raise ValueError("seed must be non-negative")
                key = hashlib.blake2b(
                    s.to_bytes((s.bit_length() + 7) // 8 or 1, "little"),
                    person=b"dpb-user-key",
                    digest_size=16,
                ).digest()
            self._key = key
        return key

    # -- hashing ----------------------------------------------------------------------------
    def hash_users(self, user_ids: Sequence[Any] | npt.ArrayLike) -> npt.NDArray[np.uint64]:
        """Keyed 64-bit hashes (uint64) of user ids; ids are compared as ``str(id)``.

        Two ids with the same string form are one user (merging users only drops more rows).
        """
        tmpl: hashlib.blake2b | None = self.__dict__.get("_hash_template")
        if tmpl is None:  # a keyed BLAKE2b state, copied per id (cheaper than re-keying)
            tmpl = self._hash_template = hashlib.blake2b(key=self._mac_key(), digest_size=8)
        ids = np.asarray(user_ids, dtype=object).reshape(-1).tolist()
        if any(v is None for v in ids):
            raise ValueError("user_id must not be None (omit user ids for event level)")

        def one(v: object) -> bytes:
            h = tmpl.copy()
            h.update(str(v).encode())
            return h.digest()

        out = np.frombuffer(b"".join([one(v) for v in ids]), dtype="<u8").astype(np.uint64)
        return out

    # -- admission --------------------------------------------------------------------------
    def admit(self, users: npt.ArrayLike, windows: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        """Decide, in order, which events enter the private statistics; returns a bool mask.

        ``users`` are keyed hashes (:meth:`hash_users`), ``windows`` the window of each event.
        """
        self._init()
        users = np.asarray(users, dtype=np.uint64).reshape(-1)
        windows = np.asarray(windows, dtype=np.int64).reshape(-1)
        if users.shape != windows.shape:
            raise ValueError("users and windows must have the same length")
        k = int(self.max_contributions_per_user)
        e_cap = self.max_releases_per_user
        cap = int(self.max_users)
        closed = self._closed_below
        rel = self._releases
        tables = self._windows
        c = self.counters
        out = np.zeros(users.size, dtype=bool)
        for i, (u, w) in enumerate(zip(users.tolist(), windows.tolist())):
            if w < closed:
                c["bounded_closed"] += 1
                continue
            tab = tables.get(w)
            if tab is None:
                tab = tables[w] = {}
            cnt = tab.get(u, 0)
            if cnt >= k:
                c["bounded_contributions"] += 1
                continue
            if cnt == 0:  # the user's first admitted event in this window
                if len(tab) >= cap:
                    c["bounded_capacity"] += 1
                    continue
                if e_cap is not None:
                    used = rel.get(u)
                    if used is None:
                        if len(rel) >= cap:
                            c["bounded_capacity"] += 1
                            continue
                        used = 0
                    if used >= e_cap:
                        c["bounded_releases"] += 1
                        continue
                    rel[u] = used + 1
            tab[u] = cnt + 1
            out[i] = True
        n_in = int(out.sum())
        c["admitted"] += n_in
        c["bounded"] += users.size - n_in
        return out

    def close_below(self, window: int) -> None:
        """Free the counts of every window < ``window``; their later events are bounded."""
        self._init()
        window = int(window)
        if window <= self._closed_below:
            return
        for w in [w for w in self._windows if w < window]:
            del self._windows[w]
        self._closed_below = window

    def memory_entries(self) -> int:
        """Counter-table entries held now (the documented memory bound's unit)."""
        self._init()
        return len(self._releases) + sum(len(t) for t in self._windows.values())

    # -- persistence (owner-only snapshots: hashes only, never ids; the key is a secret) -----
    def state_dict(self) -> dict[str, Any]:
        self._init()
        return {
            "key": self._mac_key().hex(),
            "closed_below": self._closed_below,
            "windows": {
                str(w): {format(u, "x"): n for u, n in t.items()} for w, t in self._windows.items()
            },
            "releases": {format(u, "x"): n for u, n in self._releases.items()},
            "counters": dict(self.counters),
        }

    def load_state_dict(self, state: dict[str, Any]) -> UserContributionBound:
        self._validate()
        self._key = bytes.fromhex(state["key"])
        self._hash_template = None
        self._closed_below = int(state["closed_below"])
        self._windows = {
            int(w): {int(u, 16): int(n) for u, n in t.items()} for w, t in state["windows"].items()
        }
        self._releases = {int(u, 16): int(n) for u, n in state["releases"].items()}
        self.counters = {**dict.fromkeys(COUNTERS, 0), **state["counters"]}
        return self

    def __getstate__(
        self,
    ) -> dict[str, Any]:  # pickling (multiprocessing): the hash state is rebuilt from the key
        state = dict(self.__dict__)
        state.pop("_hash_template", None)
        return state

    def __repr__(self) -> str:  # never the key
        e = self.max_releases_per_user
        return (
            f"UserContributionBound(max_contributions_per_user={self.max_contributions_per_user}, "
            f"max_releases_per_user={e}, max_users={self.max_users})"
        )
