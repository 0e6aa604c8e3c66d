"""Privacy audit of the DP-matroid batch-mean release (DESIGN §7): the certified calibration
passes, a halved noise scale is caught; see streaming_dpbandit/experiments/dp_matroid_audits.py
for the worst-case pair and why the per-round claim (2K·ε0) cannot catch the halving."""

import numpy as np
import pytest

from streaming_dpbandit.estimators.batch_means import UNIT, DoublingBatchMeans
from streaming_dpbandit.experiments import dp_matroid_audits as audits


def test_batch_release_certified_passes_and_halved_noise_is_caught():
    ok = audits.audit_batch_release(1.0, n=100_000)
    assert ok.passed, ok
    assert ok.epsilon_lb > 0.7 * ok.claimed_epsilon  # sharp, not vacuous
    halved = audits.audit_batch_release(0.5, n=100_000)
    assert not halved.passed, halved
    assert halved.epsilon_lb > 1.5 * halved.claimed_epsilon


@pytest.mark.parametrize("calibration", ["certified", "paper"])
def test_round_claim_holds(calibration):
    res = audits.audit_round(1.0, calibration, n=100_000)
    assert res.passed, res
    # with the batch membership fixed the loss reaches K·ε0 = ε_certified / 2, not more
    assert res.epsilon_lb < 0.5 * res.claimed_epsilon + 0.05


def test_the_pair_is_clipped_to_the_sensitivity():
    s0, s1, _ = audits.round_pair()
    assert np.all(s0 - s1 == 1.0)  # +10 and −10 became 1 and 0


def test_release_uses_the_audited_scale():
    """A release is (exact sum + Z)/T with Z drawn at scale multiplier/ε0 from its own stream."""
    calls = []

    class Noise:
        def generator(self, *labels, track=True):
            class G:
                def laplace(self, loc, scale):  # the exact sum comes as loc
                    calls.append((labels, loc, scale, track))
                    return loc + 0.75

            return G()

    est = DoublingBatchMeans(2, epsilon0=0.25, scale_multiplier=0.5)
    est.learn_many(np.array([1, 1, 1]), np.array([0.2, 0.3, 0.4]), np.array([1, 2, 3]))
    rels = est.release(Noise(), "b", "dp-matroid")
    exact = (round(0.3 * UNIT) + round(0.4 * UNIT)) / UNIT
    assert calls == [
        (("b", "dp-matroid", 1, 0), round(0.2 * UNIT) / UNIT, 2.0, False),
        (("b", "dp-matroid", 1, 1), exact, 2.0, False),
    ]
    assert rels[1].noisy_mean == (exact + 0.75) / 2
