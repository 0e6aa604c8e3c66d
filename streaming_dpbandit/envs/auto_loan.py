"""E3: the semi-synthetic auto-loan pricing bandit (LDP-GLB spec §11, the paper's Appendix G).

The data are the On-Line Auto Lending dataset CRPM-12-001 (Center for Pricing and Revenue
Management, Columbia Business School), obtainable from the provider on request and under its
terms. **The product never downloads, bundles or commits it**: pass the path of your copy
(the authors' file name is ``CPRM_AutoLOan_OnlineAutoLoanData.csv``).

Required columns: ``apply, Primary_FICO, onemonth, Term, Amount_Approved, CarType,
Competition_rate, mp``.

* Base features: Primary_FICO, onemonth, Term, Amount_Approved, Competition_rate, a constant 1
  and one-hot CarType (9 with the dataset's three car types); interactions with the price double
  them to d = 18. The label is ``apply``.
* Imputed price (ground-truth fit only): q = 1/(1 + onemonth/100),
  p = mp·q(1 − q^Term)/(1 − q) − Amount_Approved.
* Ground truth: a min-max scaler fitted on [X, p·X]; an L2-regularised logistic regression
  (C = 1, no intercept — scikit-learn's defaults, solved here with L-BFGS) on all rows; θ* is
  its coefficient vector. This uses the whole private dataset: acceptable for a simulation only.
* Arms: K = 25 prices ``linspace(0, −25000, 25)``; arm j's context is scaler([record,
  record·price_j]). Rows are shuffled per repetition, one row per round.
* The learner is fed the logistic **mean** σ(xᵀθ*), not a Bernoulli draw (the authors' code);
  regret uses the same mean.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from .base import Environment

__all__ = ["REQUIRED_COLUMNS", "AutoLoanEnv", "fit_logistic", "load_auto_loan"]

REQUIRED_COLUMNS = (
    "apply",
    "Primary_FICO",
    "onemonth",
    "Term",
    "Amount_Approved",
    "CarType",
    "Competition_rate",
    "mp",
)
NUMERIC = ("Primary_FICO", "onemonth", "Term", "Amount_Approved", "Competition_rate")
PRICES = np.linspace(0.0, -25000.0, 25)


def load_auto_loan(path: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """Read the CSV: (base features (n, 6 + #car types), imputed price (n,), apply (n,), types).

    Rows with a missing or non-numeric required value are skipped.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"auto-loan data: no file at {path}")
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"auto-loan data: missing columns {missing}")
        rows = []
        for rec in reader:
            try:
                nums = [float(rec[c]) for c in NUMERIC]
                mp, apply = float(rec["mp"]), float(rec["apply"])
            except (TypeError, ValueError):
                continue
            car = (rec["CarType"] or "").strip()
            if not car or not all(map(math.isfinite, [*nums, mp, apply])):
                continue
            rows.append((nums, car, mp, apply))
    if not rows:
        raise ValueError("auto-loan data: no usable rows")
    types = sorted({r[1] for r in rows})
    n = len(rows)
    X = np.zeros((n, len(NUMERIC) + 1 + len(types)))
    price = np.empty(n)
    y = np.empty(n)
    for i, (nums, car, mp, apply) in enumerate(rows):
        X[i, : len(NUMERIC)] = nums
        X[i, len(NUMERIC)] = 1.0
        X[i, len(NUMERIC) + 1 + types.index(car)] = 1.0
        onemonth, term, amount = nums[1], nums[2], nums[3]
        q = 1.0 / (1.0 + onemonth / 100.0)
        price[i] = mp * q * (1.0 - q**term) / (1.0 - q) - amount
        y[i] = apply
    return X, price, y, types


def fit_logistic(X: np.ndarray, y: np.ndarray, C: float = 1.0) -> np.ndarray:
    """L2 logistic regression without intercept: min C·Σ logloss + ½‖w‖² (scikit-learn's
    objective with its defaults), by L-BFGS."""
    from scipy import optimize, special

    s = 2.0 * y - 1.0

    def fg(w):
        z = s * (X @ w)
        loss = C * np.logaddexp(0.0, -z).sum() + 0.5 * w @ w
        grad = -C * X.T @ (s * special.expit(-z)) + w
        return loss, grad

    res = optimize.minimize(
        fg, np.zeros(X.shape[1]), jac=True, method="L-BFGS-B", options={"maxiter": 5000}
    )
    return res.x


class AutoLoanEnv(Environment):
    """E3 over a user-supplied copy of the auto-loan CSV.

    Parameters
    ----------
    data_path
        Path of the CSV (never downloaded by the product).
    shuffle_seed
        Row order of the stream (one shuffle per repetition).
    """

    name = "ldp-glb-auto-loan"

    def __init__(self, data_path: str, shuffle_seed: int = 0):
        self.data_path = str(data_path)
        self.shuffle_seed = shuffle_seed
        base, price, y, types = load_auto_loan(data_path)
        self.car_types = types
        full = np.hstack([base, price[:, None] * base])
        lo, hi = full.min(axis=0), full.max(axis=0)
        span = np.where(hi > lo, hi - lo, 1.0)
        self._lo, self._span = lo, span
        self.theta = fit_logistic((full - lo) / span, y)
        self._base = base
        self.d = full.shape[1]
        self.K = PRICES.size
        self._order = np.random.default_rng(shuffle_seed).permutation(base.shape[0])
        self._pos = 0

    def arm_contexts(self, base: np.ndarray) -> np.ndarray:
        """Scaled contexts (n, K, d) of the 25 prices for base rows (n, b)."""
        full = np.concatenate(
            [
                np.broadcast_to(base[:, None, :], (base.shape[0], self.K, base.shape[1])),
                base[:, None, :] * PRICES[None, :, None],
            ],
            axis=2,
        )
        return (full - self._lo) / self._span

    def contexts(self, rng: np.random.Generator, n: int) -> np.ndarray:
        idx = self._order[(self._pos + np.arange(n)) % self._order.size]
        self._pos += n
        return self.arm_contexts(self._base[idx])

    def mean_rewards(self, X: np.ndarray) -> np.ndarray:
        from scipy import special

        return special.expit(X @ self.theta)

    def reward_noise(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.zeros((n, self.K))  # the learner sees the mean (the authors' code)

    def describe(self) -> dict:
        return {"name": self.name, "d": self.d, "K": self.K, "shuffle_seed": self.shuffle_seed}
