"""Feature hashing of JSON feature objects, as Vowpal Wabbit does it (docs/features.md).

A request carries *feature objects* — the JSON objects Azure Personalizer's users send:
``contextFeatures`` for the request, ``features`` per action. :class:`FeatureHasher` maps them
to a (K, d) matrix, one row per action, of the bandit's dimension d:

* **Namespaces.** In each feature object, a top-level key whose value is an object names a
  namespace (``{"user": {"age": 31}}``: feature ``age`` in namespace ``user``); any other
  top-level key is a feature of the side's default namespace, ``context`` or ``action``.
  ``namespaces`` (a list of names) keeps only those namespaces; ``None`` keeps all.
* **Features.** Inside a namespace: a number is a numeric feature (``age`` with value 31);
  a string is an indicator (``tier=gold`` with value 1); ``true`` is an indicator of the key
  (``false`` and ``null`` are absent); a nested object prefixes its keys with ``key.``; a list
  gives ``key[i]`` for its numbers, ``key=value`` for its strings, and its objects prefixed with
  ``key.``.
* **Hashing.** A feature's hash h is MurmurHash3 (x86, 32-bit, the hash of VW) of its name,
  seeded with the hash of its namespace (itself seeded with ``seed``); its index is
  ``⌊h·d / 2³²⌋`` (Lemire's multiply-shift reduction of a 32-bit hash to [0, d): uniform like
  ``h mod d``, without a division). Colliding features add up.
* **Interactions.** Each pair ``(c, a)`` of ``interactions`` adds, for every feature i of
  context namespace c and j of action namespace a, the feature with index
  the hash ``((h_i · 16777619) XOR h_j) mod 2³²`` (VW's quadratic hash), reduced to [0, d)
  as above, and the value ``v_i · v_j``;
  ``"*"`` matches every namespace. The default ``[("*", "*")]`` crosses every context feature
  with every action feature: with one parameter shared by the actions (FLIPHAT, LinUCB), the
  context can change which action is best only through such products.
* **Row of action k** = its own features + the context's features (the same in every row)
  + the interactions of the context with action k's features.

It differs from VW in three documented ways: a hash is reduced to [0, d) by multiply-shift
(VW keeps its low b bits, d = 2^b), a
string feature is named ``key=value`` (VW concatenates without ``=``), and names made only of
digits are hashed like any other string (VW uses their integer value).

Bad input raises :class:`FeatureError` naming the field (``contextFeatures[0].user.age``):
a value that is not a number, string, boolean, null, object or list, a non-finite number, or
more than ``max_features`` features in one request.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import mmh3
import numpy as np

from ..utils.arrays import FloatArray, IntArray

__all__ = ["FNV_PRIME", "FeatureError", "FeatureHasher", "murmur3"]

#: VW's multiplier of the first hash of a quadratic interaction
FNV_PRIME = 16777619
_MASK32 = 0xFFFFFFFF
_FLOAT_MAX = 1.7976931348623157e308

#: The flattened features of a request: hashes, values and namespace ids, in one order.
_Out = tuple[list[int], list[float], list[int]]


def murmur3(text: str, seed: int = 0) -> int:
    """MurmurHash3 x86 32-bit of ``text`` (UTF-8), unsigned: the hash of Vowpal Wabbit.

    >>> murmur3("hello"), murmur3("hello", seed=1)
    (613153351, 3142237357)
    """
    return int(mmh3.hash(text, seed & _MASK32, signed=False))


class FeatureError(ValueError):
    """A feature object the featuriser cannot use; ``field`` names it (e.g.
    ``actions[3].features[0].price``)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class _Namespace:
    """A namespace's seed, id and name caches (numeric names; string names by value)."""

    __slots__ = ("cat", "id", "num", "seed")

    def __init__(self, seed: int, ns_id: int):
        self.seed = seed
        self.id = ns_id
        self.num: dict[str, int] = {}
        self.cat: dict[str, dict[str, int]] = {}


class FeatureHasher:
    """Hash JSON feature objects into a (K, d) matrix, VW-style (module docstring).

    Parameters
    ----------
    d
        The bandit's dimension: every hash is reduced to an index in [0, d).
    namespaces
        Namespaces kept (``None``: all). The default namespaces are ``context`` and ``action``.
    interactions
        Pairs ``(context namespace, action namespace)`` crossed; ``"*"`` matches any.
    seed
        Seed of the namespace hashes (a different seed gives other collisions).
    max_features
        Most features (before interactions) in one request.
    cache_size
        Hashes of names remembered; past it the caches start again (hashes are a function of
        the name: forgetting one costs only its recomputation).

    Examples
    --------
    >>> h = FeatureHasher(d=16)
    >>> X = h.transform(
    ...     [{"user": {"tier": "gold", "age": 31}}],
    ...     [[{"type": "news"}], [{"type": "sports", "length": 2.5}]],
    ... )
    >>> X.shape   # one row per action
    (2, 16)
    >>> # each row: the context's (1 + 31), its own features and their products with the context's
    >>> X.sum(axis=1).tolist()   # [32 + 1 + 32·1, 32 + 3.5 + 32·3.5]
    [65.0, 147.5]
    >>> # one feature: type=news in namespace action, at ⌊h·16 / 2³²⌋
    >>> h.transform([], [[{"type": "news"}]]).nonzero()[1].tolist()
    [5]
    """

    def __init__(
        self,
        d: int,
        namespaces: Sequence[str] | None = None,
        interactions: Sequence[Sequence[str]] = (("*", "*"),),
        seed: int = 0,
        max_features: int = 10_000,
        cache_size: int = 1 << 18,
    ):
        self.d = d
        self.namespaces = None if namespaces is None else list(namespaces)
        self.interactions = [tuple(p) for p in interactions]
        self.seed = seed
        self.max_features = max_features
        self.cache_size = cache_size

    # -- set-up -------------------------------------------------------------------------------
    def _check(self) -> None:
        if self.d < 1:
            raise ValueError("d must be >= 1")
        for pair in self.interactions:
            if len(pair) != 2 or not all(isinstance(n, str) and n for n in pair):
                raise ValueError(f"an interaction is a pair of namespace names, got {pair!r}")
        if self.max_features < 1 or self.cache_size < 1:
            raise ValueError("max_features and cache_size must be >= 1")

    def _reset(self) -> None:
        self._check()
        self._ns: dict[str, _Namespace] = {}
        self._entries = 0
        self._keep = None if self.namespaces is None else frozenset(self.namespaces)
        #: (actions, their arrays) of the last ``memo`` call (namespace ids are this cache's)
        self._memo: tuple[Any, ...] | None = None
        self._all_pairs = ("*", "*") in self.interactions

    def _space(self, name: str) -> _Namespace | None:
        """The namespace ``name`` (None when it is not kept)."""
        ns = self._ns.get(name)
        if ns is None:
            if self._keep is not None and name not in self._keep:
                return None
            ns = self._ns[name] = _Namespace(self._hash(name, self.seed), len(self._ns))
        return ns

    # -- flattening ---------------------------------------------------------------------------
    def _walk(self, obj: dict[str, Any], ns: _Namespace, prefix: str, out: _Out) -> None:
        """Append (hash, value, namespace id) of every feature of ``obj`` to ``out``."""
        hs, vs, ids = out
        num, cat, seed, nid = ns.num, ns.cat, ns.seed, ns.id
        for k, v in obj.items():
            name = prefix + k if prefix else k
            t = type(v)
            if t is str:
                byval = cat.get(name)
                if byval is None:
                    byval = cat[name] = {}
                h = byval.get(v)
                if h is None:
                    h = byval[v] = self._hash(name + "=" + v, seed)
                hs.append(h)
                vs.append(1.0)
            elif t is float or t is int or t is bool:
                if v is False:
                    continue
                h = num.get(name)
                if h is None:
                    h = num[name] = self._hash(name, seed)
                hs.append(h)
                vs.append(v)
            elif t is dict:
                self._walk(v, ns, name + ".", out)
                continue
            elif t is list:
                self._walk_list(v, ns, name, out)
                continue
            elif v is None:
                continue
            else:
                raise FeatureError(name, f"unsupported value of type {t.__name__}")
            ids.append(nid)

    def _walk_list(self, items: list[Any], ns: _Namespace, name: str, out: _Out) -> None:
        for i, e in enumerate(items):
            t = type(e)
            if t is dict:
                self._walk(e, ns, name + ".", out)
            elif t is str:
                self._walk({name: e}, ns, "", out)
            elif t is list:
                self._walk_list(e, ns, f"{name}[{i}]", out)
            else:
                self._walk({f"{name}[{i}]": e}, ns, "", out)

    def _hash(self, text: str, seed: int) -> int:
        self._entries += 1
        if self._entries > self.cache_size:  # start again (after this request's hashes)
            self._flush_pending = True
        return murmur3(text, seed)

    def _side(self, objects: Iterable[Any], default: str, out: _Out) -> None:
        """Flatten one side's list of feature objects (context, or one action's); the common
        top-level numbers and strings of the default namespace are handled inline."""
        hs, vs, ids = out
        dns = self._space(default)
        for obj in objects:
            if type(obj) is not dict:
                raise FeatureError("", "a feature object must be a JSON object")
            for k, v in obj.items():
                t = type(v)
                if t is dict:
                    ns = self._space(k)
                    if ns is not None:
                        self._walk(v, ns, "", out)
                    continue
                if dns is None:
                    continue
                if t is str:
                    byval = dns.cat.get(k)
                    if byval is None:
                        byval = dns.cat[k] = {}
                    h = byval.get(v)
                    if h is None:
                        h = byval[v] = self._hash(k + "=" + v, dns.seed)
                    hs.append(h)
                    vs.append(1.0)
                    ids.append(dns.id)
                elif (t is float or t is int or t is bool) and v is not False:
                    h = dns.num.get(k)
                    if h is None:
                        h = dns.num[k] = self._hash(k, dns.seed)
                    hs.append(h)
                    vs.append(v)
                    ids.append(dns.id)
                elif v is not False:
                    self._walk({k: v}, dns, "", out)

    # -- transform ----------------------------------------------------------------------------
    def transform(
        self,
        context: Sequence[dict[str, Any]],
        actions: Sequence[Sequence[dict[str, Any]]],
        fields: tuple[str, str] = ("contextFeatures", "actions"),
        memo: bool = False,
    ) -> FloatArray:
        """The (K, d) matrix of K actions (each a list of feature objects) in ``context``.

        Raises :class:`FeatureError` with the field named as in the request: by default as
        in a Personalizer Rank (``contextFeatures[i]...``, ``actions[k].features[j]...``);
        ``fields`` names the two lists otherwise (a context message's ``context_features``).

        ``memo=True`` keeps the flattened actions (and a reference to ``actions``) and reuses
        them for the next ``memo`` call whose actions are equal (``==``: one comparison
        instead of walking every action's features), as when every request offers the same
        catalogue. The matrix is the same either way (equal values hash alike; ``false`` and
        ``0``, which ``==`` does not tell apart, both add nothing); the caller must not change
        a list it passed with ``memo=True`` (the gateway passes freshly parsed requests).
        """
        if not hasattr(self, "_ns"):
            self._reset()
        self._flush_pending = False
        try:
            return self._transform(context, actions, fields, memo)
        finally:
            if self._flush_pending:  # the caches outgrew cache_size: start again
                self._reset()

    def _transform(
        self,
        context: Sequence[dict[str, Any]],
        actions: Sequence[Sequence[dict[str, Any]]],
        fields: tuple[str, str],
        memo: bool,
    ) -> FloatArray:
        K, d = len(actions), self.d
        # the context's features (hashes, values, namespace ids), then the actions' in one list
        ctx: _Out = ([], [], [])
        acts = self._memo if memo and self._memo is not None and self._memo[0] == actions else None
        try:
            self._side(context, "context", ctx)
            if acts is None:
                out: _Out = ([], [], [])
                counts = []
                n = 0
                for feats in actions:
                    self._side(feats, "action", out)
                    counts.append(len(out[0]) - n)
                    n = len(out[0])
        except FeatureError:
            raise self._locate(context, actions, fields) from None
        m = len(ctx[0])
        total = m + (n if acts is None else acts[1].size)
        if total > self.max_features:
            limit = self.max_features
            raise FeatureError(fields[1], f"{total} features in one request, at most {limit}")
        try:
            vc = np.fromiter(ctx[1], np.float64, m)
            if acts is None:
                acts = self._action_arrays(out, counts, K)
                if memo:
                    self._memo = (actions, *acts)
            else:
                acts = acts[1:]
        except (OverflowError, FloatingPointError):  # an integer beyond float64's range
            raise self._locate(context, actions, fields) from None
        if not math.isfinite(vc.sum()) and not np.isfinite(vc).all():
            raise self._locate(context, actions, fields)
        ha, va, base, first, aids = acts
        flat, weights = [first], [va]
        hc = np.fromiter(ctx[0], np.int64, m)
        if m and ha.size:
            hcf = hc * FNV_PRIME
            hcf &= _MASK32
            for ci, ai in self._pairs(ctx[2], aids):
                cross = hcf[ci, None] ^ ha[ai]  # both < 2³²: so is the XOR
                cross *= d
                cross >>= 32
                cross += base[ai]
                flat.append(cross.ravel())
                weights.append(np.multiply.outer(vc[ci], va[ai]).ravel())
        X: FloatArray = np.bincount(
            np.concatenate(flat) if len(flat) > 1 else first,
            np.concatenate(weights) if len(weights) > 1 else va,
            minlength=K * d,
        ).astype(np.float64, copy=False)  # (an empty bincount has integers)
        X = X.reshape(K, d)
        if m:
            idx = hc * d
            idx >>= 32  # ⌊h·d / 2³²⌋: the index in [0, d) of every feature
            X += np.bincount(idx, vc, minlength=d)
        return X

    def _action_arrays(
        self, out: _Out, counts: list[int], K: int
    ) -> tuple[IntArray, FloatArray, IntArray, IntArray, list[int]]:
        """The actions' hashes, values (finite: else FloatingPointError), row offsets k·d of
        each feature, its index in the (K·d) flat matrix, and their namespace ids."""
        n, d = len(out[0]), self.d
        ha = np.fromiter(out[0], np.int64, n)
        va = np.fromiter(out[1], np.float64, n)
        if not math.isfinite(va.sum()) and not np.isfinite(va).all():
            raise FloatingPointError
        base = np.repeat(np.arange(0, K * d, d, dtype=np.int64), counts)  # row k starts at k·d
        first = ha * d
        first >>= 32  # ⌊h·d / 2³²⌋: the index in [0, d) of every feature
        first += base
        return ha, va, base, first, out[2]

    def _pairs(self, cids: list[int], aids: list[int]) -> list[tuple[Any, Any]]:
        """Index selections (context features, action features) of each interaction."""
        every = slice(None)
        if self._all_pairs:
            return [(every, every)]
        c, a = np.array(cids), np.array(aids)
        out = []
        for cn, an in self.interactions:
            ci = every if cn == "*" else np.flatnonzero(c == self._id(cn))
            ai = every if an == "*" else np.flatnonzero(a == self._id(an))
            out.append((ci, ai))
        return out

    def _id(self, name: str) -> int:
        ns = self._ns.get(name)
        return -1 if ns is None else ns.id

    # -- errors -------------------------------------------------------------------------------
    @classmethod
    def _locate(
        cls, context: Sequence[Any], actions: Sequence[Sequence[Any]], fields: tuple[str, str]
    ) -> FeatureError:
        """The first unusable value, named by its path in the request."""
        cf, af = fields
        sides = [(f"{cf}[{i}]", o) for i, o in enumerate(context)]
        for k, feats in enumerate(actions):
            sides += [(f"{af}[{k}].features[{j}]", o) for j, o in enumerate(feats)]
        for path, obj in sides:
            found = cls._bad(obj, path, top=True)
            if found is not None:
                return found
        return FeatureError(cf, "unusable feature value")  # pragma: no cover

    @classmethod
    def _bad(cls, v: Any, path: str, top: bool = False) -> FeatureError | None:
        t = type(v)
        if top and t is not dict:
            return FeatureError(path, "a feature object must be a JSON object")
        if t is dict:
            for k, e in v.items():
                found = cls._bad(e, f"{path}.{k}")
                if found is not None:
                    return found
        elif t is list:
            for i, e in enumerate(v):
                found = cls._bad(e, f"{path}[{i}]")
                if found is not None:
                    return found
        elif t is float and not math.isfinite(v):
            return FeatureError(path, "numbers must be finite")
        elif t is int and abs(v) > _FLOAT_MAX:
            return FeatureError(path, "number out of range")
        elif t not in (str, int, float, bool) and v is not None:
            return FeatureError(path, f"unsupported value of type {t.__name__}")
        return None
