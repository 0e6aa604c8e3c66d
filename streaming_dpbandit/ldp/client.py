"""The client: decide with the published model, privatise on the device, report (spec §5, §6, §8).

.. code-block:: python

    from streaming_dpbandit.ldp import LDPClient, fetch_snapshot

    client = LDPClient(fetch_snapshot("http://models:9465/v1/models/shop"), max_epsilon=1.0)
    choice = client.decide(contexts)        # (K, d) segments, or the shared (d,) context
    show(choice.arm)                         # the choice happens on the device
    ...                                      # wait the fixed attribution window
    producer.send("dpbandit.feedback", key=b"shop",
                  value=client.report(choice, reward).to_json())   # reward None: timed out

Raw contexts, rewards and the chosen arm never leave the device: :meth:`LDPClient.report`
returns only the privatised payload, the model version it was computed against, a random
message id and, in the multi-parameter warm-up, the public schedule's arm. The app pins the
privacy level it accepts (``max_epsilon``, ``max_delta``): a snapshot that asks for more is
refused, so a misconfigured or malicious server cannot weaken the guarantee.

Spec: docs/specs/ldp_glb.md.
"""

from __future__ import annotations

import dataclasses
import secrets

import numpy as np
import numpy.typing as npt

from ..privacy.contribution import RowRefused
from ..privacy.noise import NoiseGenerator, NoiseSource
from ..utils.arrays import ArrayLike, BoolArray, FloatArray
from .budget import BudgetExceeded, ClientBudget
from .links import get_link
from .model import AUTHORS_CODE_LABEL, ModelSnapshot, SnapshotError
from .preprocess import clip_rewards, normalise_contexts
from .randomizers import Mechanism, build_payloads
from .report import Report, new_msg_id

__all__ = ["Choice", "LDPClient", "choose_arms"]


@dataclasses.dataclass
class Choice:
    """A decision made on the device. Holds private data: never send or log it."""

    arm: int
    model_version: int
    phase: str
    propensity: float
    _context: FloatArray = dataclasses.field(repr=False)
    _snapshot: ModelSnapshot = dataclasses.field(repr=False)
    #: set by :meth:`LDPClient.report`: a decision is reported once (one ε per round)
    _reported: bool = dataclasses.field(default=False, repr=False)

    def __repr__(self) -> str:
        return f"Choice(arm={self.arm}, model_version={self.model_version}, phase={self.phase!r})"


def choose_arms(
    scores: FloatArray, coins: FloatArray, allowed: BoolArray | None = None
) -> tuple[npt.NDArray[np.intp], FloatArray]:
    """Row-wise argmax over allowed arms, ties broken uniformly by ``coins`` in [0, 1).

    Returns (arms, propensities 1/#ties).

    >>> choose_arms(np.array([[0.0, 0.0, 0.0], [1.0, 3.0, 2.0]]), np.array([0.9, 0.5]))
    (array([2, 1]), array([0.33333333, 1.        ]))
    """
    s = np.where(allowed, scores, -np.inf) if allowed is not None else scores
    best = s.max(axis=1, keepdims=True)
    ties = s == best
    n_ties = ties.sum(axis=1)
    pick = np.minimum((coins * n_ties).astype(np.int64), n_ties - 1)
    ranks = np.cumsum(ties, axis=1) - 1
    arms = np.argmax(ties & (ranks == pick[:, None]), axis=1)
    return arms, 1.0 / n_ties


def eliminate(X: FloatArray, theta_w: FloatArray | None, h: float | None) -> BoolArray | None:
    """Eq. (7): arms with xᵀθ̂^w_a > max_a′ xᵀθ̂^w_a′ − h/2 (None: no elimination).

    ``X`` is (n, K, d) (per-arm contexts; the shared context repeated K times).
    """
    if h is None or theta_w is None:
        return None
    sw = np.einsum("nkd,kd->nk", X, theta_w)
    keep: BoolArray = sw > sw.max(axis=1, keepdims=True) - h / 2.0
    return keep


class LDPClient:
    """Decide and report for one user of one LDP-GLB model.

    Parameters
    ----------
    snapshot
        The current published :class:`ModelSnapshot` (see :meth:`update`).
    max_epsilon, max_delta
        The highest per-report (ε, δ) this app accepts; snapshots asking for more are refused.
    rng
        Source of the client's randomness (tie-breaks and noise), for tests and simulations.
        Default (``None``): every decision and every report uses a numpy generator freshly
        seeded with 128 bits from the operating system's CSPRNG (``secrets``), so no generator
        state links two reports of a device.
    budget
        Optional :class:`~.budget.ClientBudget`; every report is charged to it first.
    allow_authors_code
        Accept ``profile="authors_code"`` snapshots (simulations only).
    noise_backend
        ``"fast"`` (numpy floating-point samplers) or ``"secure"``: every report's noise from
        a keyed secure stream named by its ``msg_id`` (exact coins and sign-symmetric
        directions for the ℓ2 ball; grid releases with exact discrete Gaussian noise for OLS
        blocks, which need the model's ``gaussian="discrete"`` calibration).
        docs/privacy/secure-noise.md, "LDP randomizers".
    noise_key
        Secure backend: the device's secret key (``None``: 128 bits from the OS, per client).
        A report is reproducible from the key and its ``msg_id``.
    max_reports
        User level (docs/privacy/user-level-ldp.md): this device (one user) sends at most this
        many reports (k) to the bandit; :meth:`report` then raises
        :class:`~.budget.BudgetExceeded` and sends nothing. The model must be calibrated for k
        reports per user (its per-report ε is then the user-level target's split). The count
        (:attr:`reports_sent`) is the device's to persist; the server cannot enforce it.

    Examples
    --------
    >>> import numpy as np
    >>> from streaming_dpbandit.ldp import ModelSpec, ModelSnapshot
    >>> spec = ModelSpec(variant="sgd", setting="single", d=3, K=4, epsilon=1.0)
    >>> snap = ModelSnapshot("shop", "shop-1a2b", 7, spec, theta=np.array([1.0, 0.0, 0.0]))
    >>> client = LDPClient(snap, max_epsilon=1.0, rng=np.random.default_rng(0))
    >>> contexts = np.array([[0.1, 0.2, 0.0], [0.9, 0.1, 0.0], [0.3, 0.3, 0.3], [0, 0, 1]])
    >>> choice = client.decide(contexts)
    >>> choice.arm                                  # argmax of xᵀθ̂, decided on the device
    1
    >>> report = client.report(choice, reward=0.8)
    >>> sorted(report.to_dict())                    # no context, reward, arm or identifier
    ['bandit_id', 'model_id', 'model_version', 'msg_id', 'payload', 'type', 'v']
    >>> len(report.payload), round(float(np.linalg.norm(report.payload)), 6) == round(
    ...     spec.radius(), 6)
    (3, True)

    """

    def __init__(
        self,
        snapshot: ModelSnapshot,
        *,
        max_epsilon: float,
        max_delta: float = 0.0,
        rng: np.random.Generator | None = None,
        budget: ClientBudget | None = None,
        allow_authors_code: bool = False,
        noise_backend: str = "fast",
        noise_key: int | None = None,
        max_reports: int | None = None,
        reports_sent: int = 0,
    ):
        if noise_backend not in ("fast", "secure"):
            raise ValueError("noise_backend must be 'fast' or 'secure'")
        self.noise_backend = noise_backend
        secure = noise_backend == "secure"
        self._noise = NoiseSource(noise_key, backend="secure") if secure else None
        self.max_epsilon = float(max_epsilon)
        self.max_delta = float(max_delta)
        self.rng = rng
        self.budget = budget
        self.allow_authors_code = allow_authors_code
        if max_reports is not None and max_reports < 1:
            raise ValueError("max_reports must be >= 1 (or None)")
        self.max_reports = max_reports
        self.reports_sent = int(reports_sent)
        self._mechs: dict[tuple[str, str], Mechanism] = {}
        self.snapshot: ModelSnapshot | None = None
        self.update(snapshot)

    def _gen(self) -> np.random.Generator:
        if self.rng is not None:
            return self.rng
        return np.random.default_rng(secrets.randbits(128))

    # -- the model --------------------------------------------------------------------------
    def update(self, snapshot: ModelSnapshot) -> None:
        """Use a newer snapshot of the same model (older versions are ignored)."""
        spec = snapshot.spec
        eps, delta = spec.report_guarantee()
        if eps > self.max_epsilon * (1 + 1e-12) or delta > self.max_delta * (1 + 1e-12):
            raise SnapshotError(
                f"the model asks for (ε = {eps:g}, δ = {delta:g}) per report, more than this "
                f"app accepts (ε ≤ {self.max_epsilon:g}, δ ≤ {self.max_delta:g})"
            )
        refusal = spec.secure_refusal() if self.noise_backend == "secure" else None
        if refusal:
            raise SnapshotError(refusal)
        if spec.profile != "paper" and not self.allow_authors_code:
            raise SnapshotError(f"profile {spec.profile!r} is {AUTHORS_CODE_LABEL}")
        cur = self.snapshot
        if cur is not None:
            if snapshot.model_id != cur.model_id:
                if snapshot.bandit_id != cur.bandit_id:
                    raise SnapshotError("a snapshot of another bandit")
                self._mechs = {}  # a new model lineage (configuration change)
            elif snapshot.model_version < cur.model_version:
                return
        self.snapshot = snapshot

    # -- deciding ---------------------------------------------------------------------------
    def _current(self) -> ModelSnapshot:
        snap = self.snapshot
        if snap is None:  # pragma: no cover - the constructor installs the first snapshot
            raise RuntimeError("the client has no model snapshot")
        return snap

    def _contexts(self, contexts: ArrayLike) -> FloatArray:
        snap = self._current()
        spec = snap.spec
        X = np.asarray(contexts, dtype=np.float64)
        if spec.setting == "multi" and X.ndim == 1:
            X = np.broadcast_to(X, (spec.K, spec.d))
        if X.ndim != 2 or X.shape[1] != spec.d:
            raise ValueError(
                f"contexts must be (K, {spec.d})"
                + (f" or the shared ({spec.d},)" if spec.setting == "multi" else "")
            )
        if spec.setting == "multi" and X.shape[0] != spec.K:
            raise ValueError(f"this model has K = {spec.K} arms")
        if spec.normalise:
            return normalise_contexts(X, spec.context_scale)
        return np.array(X, dtype=np.float64)

    def decide(self, contexts: ArrayLike, ticket: int | None = None) -> Choice:
        """Choose an arm for one round, on the device.

        ``contexts``: the K segments (K, d) in single-param; the shared context (d,) or per-arm
        (K, d) contexts in multi-param. ``ticket``: the round-robin ticket of the warm-up
        (``warmup_arm="ticket"``); without one the warm-up arm is drawn uniformly.
        """
        snap = self._current()
        spec = snap.spec
        X = self._contexts(contexts)
        coin = self._gen().random(1)
        if spec.setting == "multi" and snap.phase == "warmup":
            if spec.warmup_arm == "ticket" and ticket is not None:
                arm = int(ticket) % spec.K
            else:
                arm = int(min(int(coin[0] * spec.K), spec.K - 1))
            return Choice(arm, snap.model_version, "warmup", 1.0 / spec.K, X[arm].copy(), snap)
        if spec.setting == "single":
            scores = X @ snap.theta
            allowed = None
        else:
            scores = np.einsum("kd,kd->k", X, snap.theta)
            allowed = eliminate(X[None], snap.theta_warmup, spec.h)
        arms, prop = choose_arms(scores[None, :], coin, allowed)
        arm = int(arms[0])
        return Choice(arm, snap.model_version, snap.phase, float(prop[0]), X[arm].copy(), snap)

    # -- reporting --------------------------------------------------------------------------
    def report(self, choice: Choice, reward: float | None) -> Report:
        """The privatised report of a decision; ``reward=None`` means the attribution window
        timed out (r = 0, the documented convention)."""
        if choice._reported:
            # a second report of one round is a fresh ε-LDP draw on the same data: refused
            raise RowRefused(
                "this decision was already reported; a round is reported once (each report "
                "costs its user ε), so nothing is sent",
                "duplicate_report",
            )
        snap = choice._snapshot
        spec = snap.spec
        r = 0.0 if reward is None else float(reward)
        if spec.clip_reward:
            r = float(clip_rewards([r], get_link(spec.link), spec.c_r)[0])
        if self.max_reports is not None and self.reports_sent >= self.max_reports:
            raise BudgetExceeded(
                f"this device has sent its {self.max_reports} reports (user-level bound)"
            )
        if self.budget is not None:
            self.budget.charge(*spec.report_guarantee())
        self.reports_sent += 1
        choice._reported = True
        msg_id = new_msg_id()
        rng: NoiseGenerator = (
            self._gen()
            if self._noise is None
            else self._noise.generator("ldp-report", msg_id, track=False)
        )
        payload = build_payloads(
            spec,
            choice.phase,
            snap.theta,
            np.array([choice.arm]),
            choice._context[None, :],
            np.array([r]),
            rng,
            self._mechs,
        )[0]
        return Report(
            bandit_id=snap.bandit_id,
            model_id=snap.model_id,
            model_version=snap.model_version,
            payload=payload,
            arm=choice.arm if choice.phase == "warmup" else None,
            msg_id=msg_id,
        )
