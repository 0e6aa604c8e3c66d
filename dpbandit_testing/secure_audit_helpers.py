"""Shared pieces of the secure-backend audits (tests/privacy/test_secure_*.py)."""

import itertools

from streaming_dpbandit.privacy.audit import audit
from streaming_dpbandit.privacy.noise import NoiseSource


class SecureBatches:
    """A fresh secure noise stream per audit batch (labels ("audit", tag, i), i = 0, 1, …)."""

    def __init__(self, seed: int, tag: str = "batch"):
        self._src = NoiseSource(seed, backend="secure")
        self._tag = tag
        self._calls = itertools.count()

    def next(self):
        return self._src.generator("audit", self._tag, next(self._calls), track=False)


def run_audit(sampler, epsilon, delta, n, seed, name):
    """``privacy.audit.audit`` with the audits' fixed seed convention."""
    import numpy as np

    return audit(sampler, epsilon, delta, n, np.random.default_rng(seed), name=name)


def check_audit_and_mutant(fn, sharp: float | None = None, caught_by: float | None = None):
    """The certified mechanism passes its audit and the under-noised mutant is caught.

    ``fn(multiplier)`` runs the audit; ``sharp``: the passing lower bound must exceed that
    fraction of the claim (the audit is not vacuous); ``caught_by``: the mutant's lower bound must
    exceed that multiple of the claim.
    """
    ok = fn(1.0)
    assert ok.passed, ok
    if sharp is not None:
        assert ok.epsilon_lb > sharp * ok.claimed_epsilon, ok
    bad = fn(0.5)
    assert not bad.passed, bad
    if caught_by is not None:
        assert bad.epsilon_lb > caught_by * bad.claimed_epsilon, bad
