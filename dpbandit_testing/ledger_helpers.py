"""A policy run straight into a ledger file, for the tests of ``dpbandit budget``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from streaming_dpbandit.privacy.ledger import Ledger


def run_into_ledger(
    pol: Any, path: Path, rounds: int, arms: int = 2, n_users: int | None = None
) -> None:
    """Decide ``rounds`` rounds of Gaussian contexts (``arms`` per round) with Gaussian rewards,
    appending every release to the ledger at ``path``; with ``n_users``, each row comes from
    one of that many users (``pol`` is then a ``UserLevel``)."""
    rng = np.random.default_rng(0)
    users_rng = np.random.default_rng(1)
    d = int(pol.d)
    with Ledger(path) as led:
        while pol.t < rounds:
            if pol.refit_due():
                for r in pol.refit():
                    led.append(r)
            n = min(pol.max_decide_batch(), rounds - pol.t)
            X = rng.normal(size=(n, arms, d))
            dec = pol.decide(X)
            rows = X[np.arange(n), dec.arms]
            if n_users is None:
                pol.learn(rows, rng.normal(size=n), dec.rounds)
            else:
                users = users_rng.integers(0, n_users, n)
                pol.learn(rows, rng.normal(size=n), dec.rounds, user_ids=users)
