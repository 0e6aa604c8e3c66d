"""User-level audit of FLIPHAT's N-IHT release (issue 22 §2; docs/privacy/user-level.md §6)."""

from streaming_dpbandit.experiments import user_level_audits as ula
from streaming_dpbandit.policies.fliphat import FLIPHAT


def test_user_level_fliphat_niht_audit_bounding_and_halved_noise():
    ok = ula.audit_user_niht(1.0)
    assert ok.passed, ok
    assert ok.epsilon_lb > 0.7 * ok.claimed_epsilon  # sharp: u's k admitted rows attain k·λ
    # the user's per-release part at (ε/k, δ′) is at most the event-level one at (ε, δ)
    event = FLIPHAT(d=20, s=2, epsilon=5.0, delta=0.01, eta=0.1, x_max=1.0, l1_radius=1e9)
    c = event._estimator().calibrate(1024, event.reward_clip_for(1024), 1)[0]
    assert ok.claimed_epsilon <= 2 * c["sensitivity"] / c["scale"]
    halved = ula.audit_user_niht(0.5)
    assert not halved.passed and halved.epsilon_lb > 1.5 * halved.claimed_epsilon, halved
    unbounded = ula.audit_user_niht(1.0, bound=False)  # u's k + 1 events all enter
    assert not unbounded.passed, unbounded
