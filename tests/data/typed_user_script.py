"""A library user's script, type-checked with mypy --strict (tests/test_typing.py)."""

from typing import reveal_type

import numpy as np

from streaming_dpbandit.policies.fliphat import FLIPHAT
from streaming_dpbandit.policies.linucb_disjoint import LinUCBDisjoint
from streaming_dpbandit.privacy.accountant import Accountant

policy = LinUCBDisjoint(d=2, alpha=1.0, seed=0)
reveal_type(policy)
arm = policy.pull(["a", "b"], {"a": [0.1, 0.2], "b": [0.3, 0.4]})
policy.update(arm, {"a": [0.1, 0.2], "b": [0.3, 0.4]}, 1.0)
reveal_type(arm)

fl = FLIPHAT(d=10, s=2, epsilon=1.0, delta=0.01, seed=0)
dec = fl.decide(np.zeros((1, 3, 10)))
reveal_type(dec.arms)
fl.learn(np.zeros((1, 10)), np.array([1.0]), dec.rounds)
releases = fl.refit() if fl.refit_due() else []
spend = Accountant(releases).spend("default")
reveal_type(spend.epsilon_at_delta)
