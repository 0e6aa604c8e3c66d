"""The policy interface shared by every bandit algorithm of the product (DESIGN §4).

A policy is River-compatible — a virtual subclass of ``river.bandit.base.ContextualPolicy``
(registered without importing River's bandit module, see ``_river.py``), so
``pull(arm_ids, context)`` / ``update(arm_id, context, reward)`` work and River's harnesses can
drive it — but its fast path is vectorised:

``decide(X)``
    Decide a batch of rounds with the frozen model. ``X`` is (B, K, d): per-arm feature vectors.
    Returns a :class:`DecisionBatch` (arm, propensity, round, episode, model version).
    Decisions are a deterministic function of (state, event id): ties are broken by hashing the
    event id with a non-private coin key, so a re-processed event gets the same decision.
``learn(contexts, rewards, rounds)``
    Feed back the chosen contexts (B, d) and rewards of earlier decisions (by their rounds).
``decide_frozen(X)``
    Decide with the model in force *without* consuming rounds or triggering an update: the
    frozen policy of off-policy evaluation (``replay/``). Same decisions as ``decide`` for
    the same (state, event ids); the policy's state is unchanged afterwards.
``max_decide_batch()``
    How many upcoming rounds can be decided before the policy needs a model update.
``refit_due()`` / ``refit()``
    The schedule's model update (for private policies: the private release). ``refit`` returns
    the ledger records of the releases it made; the caller persists them *before* any decision
    that uses the new model is published.

Policies expose ``privacy`` (a :class:`PrivacyStatement`), ``state_dict`` /
``load_state_dict`` (complete state) and ``explain()`` (public calibration constants).

Model broadcast (``docs/scaling.md``, pattern 2), for policies with
``supports_released_model``:

``released_model()``
    The model in force, exactly as it was privately released (nothing else: no sums, counts
    or noise state), or ``None`` while the initial, data-independent model is in force.
``load_released_model(model)`` / ``from_released_model(model, **params)``
    Turn a fresh policy into a *decide-only* one that decides (``decide_frozen``) with a
    broadcast released model; it refuses to learn or release.
``record_rounds(n)``
    The learner's side: count n rounds decided elsewhere, as ``decide`` would have.
"""

from __future__ import annotations

import abc
import dataclasses
import inspect
import secrets
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, Protocol, Self, TypeVar, cast

import numpy as np
from river.base import Base

from ..privacy.ledger import ReleaseRecord
from ..privacy.noise import NoiseSource
from ..privacy.statement import PrivacyStatement
from ..utils.arrays import AnyArray, ArrayLike, FloatArray, IntArray, MaybeArray
from ..utils.hashing import uniform_coins
from ._river import register_contextual_policy

__all__ = [
    "ArmId",
    "BasePolicy",
    "Context",
    "DecisionBatch",
    "Policy",
    "argmax_random_ties",
    "context_matrix",
]

#: An arm id of River's interface (``pull`` returns one of the ids it was given).
ArmId = TypeVar("ArmId", bound=Hashable)

#: A River-style context of one round: ``{arm_id: features}`` (features a sequence, an array
#: or a sparse ``{j: value}`` mapping), a (K, d) array, or (policies keyed by arm id) River's
#: shared ``{feature: value}`` dict.
Context = Mapping[Any, Any] | ArrayLike | None

#: Constructor parameters that are secrets and never appear in repr, logs or explain().
#: Only the noise seed is one: a public parameter (e.g. DP-LinUCB's ``noise="wishart"``, a
#: mechanism choice) must never be dropped because its name sounds secret (issue 22 §3).
SECRET_PARAMS = frozenset({"seed"})


def _is_secret_value(value: object) -> bool:
    """A noise source or generator passed as a parameter is a secret whatever its name."""
    return isinstance(value, (NoiseSource, np.random.Generator, np.random.BitGenerator))


UNBOUNDED = 1 << 62


@dataclasses.dataclass
class DecisionBatch:
    """Decisions for a batch of rounds.

    Attributes
    ----------
    arms
        Index of the chosen arm among the K candidates of each round (B,).
    propensities
        Probability that the policy chose that arm given context and state (B,).
    rounds
        Round number t (1-based) the policy assigned to each decision (B,).
    episodes
        Episode (data slice) of each round (B,); 0 for policies without episodes.
    model_version
        Version of the frozen model used.
    """

    arms: IntArray
    propensities: FloatArray
    rounds: IntArray
    episodes: IntArray
    model_version: int

    def __len__(self) -> int:
        return int(self.arms.shape[0])


def argmax_random_ties(scores: FloatArray, coins: FloatArray) -> tuple[IntArray, FloatArray]:
    """Row-wise argmax, ties broken uniformly by ``coins`` in [0, 1); returns (arms, 1/#ties).

    >>> s = np.array([[1.0, 3.0, 3.0], [0.0, 0.0, 0.0]])
    >>> argmax_random_ties(s, np.array([0.9, 0.1]))
    (array([2, 0]), array([0.5       , 0.33333333]))
    """
    best = scores.max(axis=1, keepdims=True)
    ties = scores == best
    n_ties = ties.sum(axis=1)
    pick = np.minimum((coins * n_ties).astype(np.int64), n_ties - 1)
    ranks = np.cumsum(ties, axis=1) - 1
    arms: IntArray = np.argmax(ties & (ranks == pick[:, None]), axis=1)
    prop: FloatArray = 1.0 / n_ties
    return arms, prop


def context_matrix(
    arm_ids: Sequence[Hashable], context: Context, d: int | None = None
) -> FloatArray:
    """Turn a River-style per-arm context into a (K, d) matrix, rows in ``arm_ids`` order.

    ``context`` may be a (K, d) array, or a mapping ``{arm_id: features}`` where features are
    a sequence/array of length d or a sparse mapping ``{j: value}`` with integer indices.

    >>> context_matrix(["a", "b"], {"a": [1.0, 0.0], "b": {1: 2.0}}, d=2).tolist()
    [[1.0, 0.0], [0.0, 2.0]]
    """
    if context is None:
        raise ValueError("this policy needs per-arm contexts: {arm_id: features} or a K×d array")
    if isinstance(context, Mapping):
        rows: list[FloatArray] = []
        for arm in arm_ids:
            if arm not in context:
                raise ValueError(f"no features for arm {arm!r} in the context")
            feats = context[arm]
            if isinstance(feats, Mapping):
                if d is None:
                    raise ValueError("sparse feature mappings need a known dimension d")
                row = np.zeros(d)
                for j, v in feats.items():
                    row[int(j)] = float(v)
                rows.append(row)
            else:
                rows.append(np.asarray(feats, dtype=np.float64))
        X = np.vstack(rows)
    else:
        X = np.asarray(context, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] != len(arm_ids) or (d is not None and X.shape[1] != d):
        raise ValueError(f"expected a context of shape ({len(arm_ids)}, {d}), got {X.shape}")
    return X


class BasePolicy(Base, abc.ABC):
    """What every policy shares, single-arm (:class:`Policy`) or slate
    (:class:`~.slate_base.SlatePolicy`): parameters, validation, the update schedule, the
    privacy statement, persistence."""

    #: Registry name of the policy (e.g. ``"fliphat"``).
    name: str = "policy"
    #: True for policies whose statistics are released privately.
    private: bool = False
    #: True when ``learn`` files each row under the update that owns its round (FLIPHAT's
    #: episodes): a streaming caller may then feed rows as soon as their rewards resolve.
    #: Otherwise the next update reads every row learned before it, and the caller feeds rows
    #: in round order (see ``stream/bandit.py``, ``feedback_lag_rounds``).
    routes_rows_by_round: bool = False
    #: What a private policy protects (its statement's unit and neighbouring relation).
    privacy_unit: str = "n/a"
    neighbouring: str = "n/a"

    @classmethod
    def _unit_test_params(cls) -> Iterator[dict[str, Any]]:
        """Small valid constructor parameters (single-arm policies: contexts of 3 arms, d=4) for
        the generic checks in ``streaming_dpbandit.checks`` and the tests; each policy yields
        its own."""
        yield from super()._unit_test_params()

    def validate(self) -> None:
        """Raise ``ValueError`` when the parameters contradict each other.

        The one home of a policy's cross-field rules: the configuration
        (``streaming_dpbandit.config``) calls it before anything runs, the policy before its
        first round.
        """
        self._validate()

    def _validate(self) -> None:
        return None

    # -- configuration: ``streaming_dpbandit.config`` derives a policy's from its constructor --
    #: False for a policy that no configuration builds (``simulate`` builds it itself).
    configurable: ClassVar[bool] = True
    #: Constructor parameters that no configuration sets: the privacy audit's noise multiplier
    #: and the tests' tie rule.
    not_configurable: ClassVar[frozenset[str]] = frozenset({"noise_scale_multiplier", "ties"})
    #: Parameters that a configuration must state although the constructor has a default.
    required_in_config: ClassVar[frozenset[str]] = frozenset()
    #: A parameter's field name in a configuration, where they differ.
    config_names: ClassVar[Mapping[str, str]] = {}
    #: Older names that a configuration still accepts for a parameter.
    config_aliases: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    #: A parameter's type in a configuration, where the constructor's is not a JSON type.
    config_types: ClassVar[Mapping[str, Any]] = {}
    #: Parameters added by a later version whose default changes the behaviour: the value
    #: that reproduces how a state written before the parameter existed behaved (a snapshot
    #: without the parameter resumes only under that value). Every policy drew its noise from
    #: the fast backend before ``noise_backend`` existed (its default is ``"auto"`` since issue
    #: 31 §5): a subclass that adds its own entries keeps this one.
    config_before_added: ClassVar[Mapping[str, Any]] = {"noise_backend": "fast"}

    @classmethod
    def variants(cls) -> dict[tuple[str, object], type]:
        """Classes that one parameter value selects instead of this one (PrivateLASSO's
        ``calibration="paper"``): ``{(parameter, value): class}``."""
        return {}

    @classmethod
    def config_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        """The constructor's arguments for a configuration's values (a default that depends on
        other parameters is filled here)."""
        return params

    def simulation_only(self) -> str | None:
        """Why these parameters are refused outside ``mode: simulation`` (None: they are not).
        By default the papers' calibrations (``calibration="paper"``)."""
        if getattr(self, "calibration", None) == "paper":
            return (
                "calibration=paper is for reproducing the paper's figures only and is refused "
                "outside mode=simulation"
            )
        return None

    def secure_by_default(self) -> bool:
        """Whether the policy, as configured, has an affordable secure-noise construction:
        then every command (library, ``simulate``, ``explain``, ``replay``, ``serve``) draws its
        noise from the secure backend unless ``noise_backend`` says otherwise
        (``noise_backend="auto"``, issue 31 §5; docs/privacy/secure-noise.md)."""
        return True

    def max_decide_batch(self) -> int:
        """Rounds that can be decided before the next model update is due."""
        return UNBOUNDED

    def refit_due(self) -> bool:
        return False

    def refit(self) -> list[ReleaseRecord]:
        """Compute the model update the schedule requires; return its ledger records."""
        return []

    def refit_reads_through(self) -> int:
        """Last round whose row the due refit reads.

        A streaming caller makes sure every decision up to this round has its reward resolved
        (joined or expired) before it calls :meth:`refit`; rows of later rounds wait for the
        next refit. Default: every round decided so far.
        """
        return self.t

    # -- user-level contribution bounding (docs/privacy/user-level.md) ----------------------
    def contribution_windows(self, rounds: ArrayLike) -> IntArray:
        """Bounding window of the rows of ``rounds``: the data slice their private statistics
        belong to (``policies/user_level.py`` admits at most k rows per user per window).

        Default: one window for the whole run (k bounds a user's rows over the run) — valid for
        every policy. A policy whose rows each enter exactly one data slice, known from the
        round, overrides this (FLIPHAT: the episode).
        """
        return np.zeros(np.shape(rounds), dtype=np.int64)

    def open_windows_from(self) -> int:
        """Windows below this one are released: their per-user counts may be freed (rows that
        still arrive for them are not learned from). Default 0 (the one window stays open)."""
        return 0

    # -- noise backend (docs/privacy/secure-noise.md) -----------------------------------------
    @property
    def noise_backend_in_force(self) -> str:
        """The noise backend drawn from: ``noise_backend``, with ``"auto"`` (the default)
        resolved to ``"secure"`` where :meth:`secure_by_default` (else ``"fast"``)."""
        nb = str(getattr(self, "noise_backend", "fast"))
        if nb == "auto":
            return "secure" if self.secure_by_default() else "fast"
        return nb

    def _check_resumed_backend(self, state: dict[str, Any]) -> None:
        """Refuse, with one line, a state written on another noise backend than ``"auto"``
        resolves to here: before issue 31 §5 the library's default was ``fast``, so a state
        saved then must resume as written (``noise_backend="fast"``) or switch on purpose
        (``"secure"``: each release records its own backend; docs/privacy/secure-noise.md).
        An explicit ``noise_backend`` is the caller's choice and is not checked here."""
        if getattr(self, "noise_backend", None) != "auto":
            return
        noise = state.get("noise")
        written = (noise.get("backend") if isinstance(noise, dict) else None) or state.get(
            "params", {}
        ).get("noise_backend", "fast")
        now = self.noise_backend_in_force
        if written in ("fast", "secure") and written != now:
            raise ValueError(
                f"this state was drawn on the {written} noise backend but noise_backend='auto' "
                f"is {now} here: pass noise_backend='{written}' to resume it as written, or "
                f"noise_backend='{now}' to switch"
            )

    @property
    def t(self) -> int:
        """Number of rounds decided so far."""
        return int(getattr(self, "_t", 0))

    @property
    def model_version(self) -> int:
        """The version of the model in force (``_version``; 0 before the first update)."""
        self._build_state()
        return int(getattr(self, "_version", 0))

    def _build_state(self) -> None:
        init = getattr(self, "_state", None)  # the policy's lazily built state, if it has one
        if init is not None:
            init()

    @property
    def privacy(self) -> PrivacyStatement:
        return PrivacyStatement(
            model="none",
            unit="n/a",
            neighbouring="n/a",
            epsilon=None,
            delta=None,
            calibration="non-private",
            scope="This policy is a non-private baseline: it gives no privacy guarantee.",
        )

    def _joint_statement(self, **kw: Any) -> PrivacyStatement:
        """A joint-DP statement of :attr:`privacy_unit` at the policy's (``epsilon``, ``delta``)."""
        eps, delta = getattr(self, "epsilon", None), getattr(self, "delta", None)
        return PrivacyStatement("joint", self.privacy_unit, self.neighbouring, eps, delta, **kw)

    def explain(self, horizon: int | None = None) -> dict[str, Any]:
        return {"policy": self.name, "private": self.private, "params": self.public_params()}

    # -- helpers ---------------------------------------------------------------------------
    def public_params(self) -> dict[str, Any]:
        return {
            k: v
            for k, v in self._get_params().items()
            if k not in SECRET_PARAMS and not _is_secret_value(v)
        }

    def _coin_key(self) -> int:
        key: int | None = getattr(self, "_tie_key", None)
        if key is None:
            seed = getattr(self, "seed", None)
            if seed is None:
                key = secrets.randbits(64)
            else:
                key = int(
                    np.random.SeedSequence([int(seed), 0x7153]).generate_state(2, np.uint64)[0]
                )
            self._tie_key = key
        return key

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.public_params().items())
        return f"{type(self).__name__}({params})"

    # -- persistence -------------------------------------------------------------------------
    @abc.abstractmethod
    def state_dict(self) -> dict[str, Any]: ...

    def _state_header(self) -> dict[str, Any]:
        """The keys a ``state_dict`` starts with: the policy's name, parameters and round."""
        return {"policy": self.name, "params": self._get_params(), "t": self.t}

    @abc.abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> Self: ...

    @classmethod
    def _init_param_names(cls) -> list[str]:
        return [p for p in inspect.signature(cls.__init__).parameters if p != "self"]


@register_contextual_policy
class Policy(BasePolicy):
    """Base class of the single-arm policies. Subclasses implement the vectorised methods."""

    #: True when the policy implements the model-broadcast methods (``released_model``,
    #: ``load_released_model``, ``record_rounds``).
    supports_released_model: bool = False
    #: True when the policy keeps per-arm models keyed by arm id: ``decide`` takes
    #: ``arm_ids=`` (the callers in ``stream/`` and ``replay/`` pass them), and River's
    #: shared-context dict ``{feature: value}`` is accepted by ``pull``/``update``.
    keyed_by_arm_id: bool = False

    # River's Policy.__init__ sets reward bookkeeping we do not use (hence no subclassing of
    # ContextualPolicy, only its interface); subclasses store their own parameters only
    # (River idiom) and build state lazily.

    # -- vectorised interface --------------------------------------------------------------
    @abc.abstractmethod
    def decide(
        self, X: ArrayLike, event_ids: ArrayLike | None = None, mask: ArrayLike | None = None
    ) -> DecisionBatch:
        """Decide B rounds; ``X`` is (B, K, d); ``mask`` (B, K) marks available arms."""

    @abc.abstractmethod
    def learn(
        self, contexts: ArrayLike, rewards: ArrayLike, rounds: ArrayLike, ids: MaybeArray = None
    ) -> None:
        """Learn from chosen contexts (B, d) and rewards (B,) of the decisions of ``rounds``."""

    #: Attributes that ``decide`` advances (restored by :meth:`decide_frozen`).
    _DECIDE_STATE: tuple[str, ...] = ("_t", "_since")
    #: (arm ids, round) of the last River ``pull`` (set by :meth:`pull`).
    _river_last: tuple[list[Any], int]

    def decide_frozen(
        self,
        X: ArrayLike,
        event_ids: ArrayLike | None = None,
        mask: ArrayLike | None = None,
        **kw: Any,
    ) -> DecisionBatch:
        """Decide B rounds with the model in force, leaving the policy's state unchanged.

        The frozen policy of off-policy evaluation: no rounds are consumed, no update becomes
        due and the schedule's batch limit does not apply (a due update is simply not made).
        With event ids, the decisions equal those ``decide`` would make for the same ids
        (ties are broken by hashing the ids, not the rounds).

        >>> import numpy as np
        >>> from streaming_dpbandit.policies import RandomPolicy
        >>> pol = RandomPolicy(d=2, seed=0)
        >>> frozen = pol.decide_frozen(np.zeros((5, 3, 2)), event_ids=np.arange(5))
        >>> pol.t, bool((frozen.arms == pol.decide(np.zeros((5, 3, 2)), np.arange(5)).arms).all())
        (0, True)
        """
        self._build_state()
        saved = {a: getattr(self, a) for a in self._DECIDE_STATE if hasattr(self, a)}
        missing = [a for a in self._DECIDE_STATE if a not in saved]
        counters = getattr(self, "_counters", None)
        counters_copy = dict(counters) if isinstance(counters, dict) else None
        extra = self._save_decide_extra()
        self._frozen_eval = True
        try:
            return self.decide(X, event_ids, mask, **kw)
        finally:
            self._frozen_eval = False
            for a, v in saved.items():
                setattr(self, a, v)
            for a in missing:
                if hasattr(self, a):
                    delattr(self, a)
            if counters_copy is not None:
                assert isinstance(counters, dict)  # copied above only when it is one
                counters.clear()
                counters.update(counters_copy)
            self._restore_decide_extra(extra)

    def _save_decide_extra(self) -> object:
        """Hook: state besides ``_DECIDE_STATE`` and ``_counters`` that ``decide`` mutates."""
        return None

    def _restore_decide_extra(self, saved: Any) -> None:
        return None

    # -- model broadcast (docs/scaling.md, pattern 2) ---------------------------------------
    def released_model(self) -> dict[str, Any] | None:
        """The model in force as privately released, or ``None`` (initial model).

        A dict ``{"model_version": int, "release_ids": [str], "payload": dict}`` whose payload
        holds released (already private) values only, equal to the ``release`` field of the
        ledger records named by ``release_ids``.
        """
        return None

    def frozen_scores(self, X: ArrayLike) -> FloatArray:
        """The (B, K) scores the model in force ranks arms by, higher first: the decision is
        their argmax, exact ties broken by the coins (a ranking of the other arms, e.g. the
        gateway's, orders them by score). Only for policies with ``supports_released_model``."""
        raise NotImplementedError(f"policy {self.name!r} does not expose its scores")

    def rank_frozen(
        self, x: FloatArray, event_id: str | int, mask: AnyArray | None = None
    ) -> tuple[int, float, int, FloatArray]:
        """One round, the K candidates ``x`` (K, d), decided with the model in force and
        ranked, leaving the state unchanged (the gateway's Rank): ``(arm, propensity, model
        version, scores)`` — the decision :meth:`decide_frozen` makes for ``event_id`` and the
        (K,) :meth:`frozen_scores`, −∞ where ``mask`` (1, K) is False. Only for policies with
        ``supports_released_model``; they may compute both at once."""
        X = x[None]
        dec = self.decide_frozen(X, event_ids=[event_id], mask=mask)
        scores = self.frozen_scores(X)[0]
        if mask is not None:
            scores = np.where(mask[0], scores, -np.inf)
        return int(dec.arms[0]), float(dec.propensities[0]), int(dec.model_version), scores

    def load_released_model(self, model: dict[str, Any]) -> Self:
        """Decide from now on with a broadcast released model (see :meth:`released_model`).

        Only for a fresh policy, which becomes decide-only: ``learn``, ``refit`` and
        ``record_rounds`` raise. Raises ``ValueError`` for a malformed model.
        """
        raise NotImplementedError(f"policy {self.name!r} cannot decide from a released model")

    @classmethod
    def from_released_model(cls, model: dict[str, Any] | None, **params: Any) -> Self:
        """A decide-only policy built from its parameters and a released model.

        ``model=None`` gives the policy's initial (data-independent) model.
        """
        pol = cls(**params)
        if not cls.supports_released_model:
            raise NotImplementedError(f"policy {cls.name!r} cannot decide from a released model")
        return pol if model is None else pol.load_released_model(model)

    def record_rounds(self, n: int) -> IntArray:
        """Count ``n`` rounds decided elsewhere (by decision replicas); returns their rounds.

        The learner of a model broadcast calls this instead of ``decide``: the round counter and
        the schedule advance exactly as ``decide`` would advance them (at most
        ``max_decide_batch()`` rounds, never across a due model update).
        """
        raise NotImplementedError(f"policy {self.name!r} has no model-broadcast learner")

    def _coins(self, rounds: ArrayLike, event_ids: ArrayLike | None) -> FloatArray:
        ids = rounds if event_ids is None else event_ids
        return uniform_coins(self._coin_key(), np.asarray(ids))

    def _refitted(self) -> list[ReleaseRecord]:
        """The end of a refit without a private release: the model version advances, nothing
        is released (no ledger record)."""
        self._version: int = getattr(self, "_version", 0) + 1
        return []

    def _decide_batch(self, X: ArrayLike) -> tuple[FloatArray, IntArray]:
        """``decide``'s first step: the state built, ``X`` checked (:meth:`_check_batch`) and
        the rounds of the batch (t + 1 … t + B)."""
        self._build_state()
        X = self._check_batch(X, getattr(self, "d", None))
        t = self.t
        return X, np.arange(t + 1, t + X.shape[0] + 1, dtype=np.int64)

    def _check_batch(self, X: ArrayLike, d: int | None) -> FloatArray:
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 3 or (d is not None and X.shape[2] != d):
            raise ValueError(f"decide expects X of shape (B, K, {d}), got {X.shape}")
        if getattr(self, "_frozen_eval", False):
            return X
        if self.refit_due():
            raise RuntimeError("a model update is due: call refit() before deciding")
        if X.shape[0] > self.max_decide_batch():
            raise ValueError(
                f"batch of {X.shape[0]} rounds crosses a model update "
                f"(at most {self.max_decide_batch()} decidable now)"
            )
        return X

    def _learn_rows(
        self, contexts: ArrayLike, rewards: ArrayLike, rounds: ArrayLike, decided: str = ""
    ) -> tuple[FloatArray, FloatArray, IntArray]:
        """``learn``'s first step: the state built, contexts (B, d), rewards (B,) and rounds (B,)
        as arrays (ValueError on other shapes), and with ``decided`` (the unit's name, e.g.
        ``"round"``) rounds this policy never decided refused: the one check of what a policy
        is given to learn from."""
        shapes = "learn expects contexts (B, d), rewards (B,) and rounds (B,)"
        X, y = self._learn_xy(contexts, rewards, shapes)
        r = np.asarray(rounds, dtype=np.int64).reshape(-1)
        if r.shape != y.shape:
            raise ValueError(shapes)
        if decided:
            self._check_decided(r, decided)
        return X, y, r

    def _learn_xy(
        self,
        contexts: ArrayLike,
        rewards: ArrayLike,
        shapes: str = "learn expects contexts (B, d) and rewards (B,)",
    ) -> tuple[FloatArray, FloatArray]:
        """``learn``'s first step for a policy that does not read the rounds: the state built,
        contexts (B, d) and rewards (B,) as arrays (ValueError ``shapes`` otherwise)."""
        self._build_state()
        X = np.asarray(contexts, dtype=np.float64)
        y = np.asarray(rewards, dtype=np.float64).reshape(-1)
        if X.shape != (y.size, getattr(self, "d", None)):
            raise ValueError(shapes)
        return X, y

    def _check_decided(self, rounds: IntArray, unit: str = "round") -> None:
        """Refuse rows of rounds this policy never decided (outside 1 … t)."""
        if rounds.size and (rounds.min() < 1 or rounds.max() > self.t):
            raise ValueError(f"learn() got a {unit} that was never decided")

    # -- River compatibility ---------------------------------------------------------------
    def _pull(self, arm_ids: Iterable[ArmId], context: Context) -> ArmId:
        # River's abstract hook (kept for River's callers)
        return self.pull(arm_ids, context)

    def pull(self, arm_ids: Iterable[ArmId], context: Context = None) -> ArmId:
        """River interface: choose one arm for one round (refits first if due); returns one
        of ``arm_ids``."""
        ids = list(arm_ids)
        X = self._river_matrix(ids, context)
        if self.refit_due():
            self.refit()
        if self.keyed_by_arm_id:
            # keyed_by_arm_id is the flag of the policies whose decide takes arm_ids=
            dec = cast(_KeyedByArmId, self).decide(X[None, :, :], arm_ids=ids)
        else:
            dec = self.decide(X[None, :, :])
        self._river_last = (ids, int(dec.rounds[0]))
        return ids[int(dec.arms[0])]

    def update(self, arm_id: Hashable, context: Context, reward: float, **kwargs: Any) -> None:
        """River interface: learn the reward of the last ``pull`` (a policy keyed by arm id
        learns the reward of any ``arm_id``, as River's per-arm policies do)."""
        last = getattr(self, "_river_last", None)
        if self.keyed_by_arm_id:
            if isinstance(context, Mapping):  # shared dict, or per-arm {arm_id: features}
                row = self._river_matrix([arm_id], context)
            elif last is not None and arm_id in last[0]:
                row = self._river_matrix(last[0], context)[[last[0].index(arm_id)]]
            else:
                raise ValueError(f"no features for arm {arm_id!r} in the context")
            # keyed_by_arm_id is the flag of the policies that have learn_arms
            cast(_KeyedByArmId, self).learn_arms(row, [float(reward)], [arm_id])
        else:
            if last is None:
                raise RuntimeError("update() without a preceding pull()")
            arm_ids, t = last
            X = self._river_matrix(arm_ids, context)
            self.learn(X[[arm_ids.index(arm_id)]], np.array([float(reward)]), np.array([t]))
        self._n = getattr(self, "_n", 0) + 1

    def _river_matrix(self, arm_ids: list[Any], context: Context) -> FloatArray:
        """(K, d) rows of a River context: per-arm, or (keyed policies) a shared dict."""
        d: int | None = getattr(self, "d", None)
        if self.keyed_by_arm_id:
            from ._contexts import is_shared_context, shared_row

            if is_shared_context(context):
                assert d is not None  # a policy keyed by arm id has its dimension d
                cols = self.__dict__.setdefault("_river_features", {})
                row = shared_row(context, d, cols)
                return np.broadcast_to(row, (len(arm_ids), d))
        elif (
            isinstance(context, Mapping)
            and context
            and not all(a in context for a in arm_ids)
            and all(not isinstance(v, (Mapping, Sequence, np.ndarray)) for v in context.values())
        ):
            raise ValueError(
                f"{self.name} has one parameter shared by all arms: a shared context would give "
                "every arm the same score; pass per-arm features {arm_id: features} "
                "(or use linucb-disjoint, one model per arm)"
            )
        return context_matrix(arm_ids, context, d)

    @property
    def ranking(self) -> list[Any]:
        return []


class _KeyedByArmId(Protocol):
    """What a policy with ``keyed_by_arm_id`` adds to :class:`Policy` (``LinUCBDisjoint``)."""

    def decide(
        self,
        X: ArrayLike,
        event_ids: ArrayLike | None = None,
        mask: ArrayLike | None = None,
        arm_ids: Sequence[Any] | None = None,
    ) -> DecisionBatch: ...

    def learn_arms(
        self, contexts: ArrayLike, rewards: ArrayLike, arm_ids: Sequence[Any]
    ) -> None: ...
