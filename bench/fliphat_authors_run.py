"""One FLIPHAT repetition with the authors' JAX code (the anchor of bench_fliphat.py's P5).

Run by ``bench_fliphat.py --sections end_to_end`` in a fresh process, with the Python of a venv
that has JAX, and the authors' repository (github.com/sunritc/FLIPHAT, commit 4b696b7; not
vendored here) on ``PYTHONPATH``. It does what the authors' ``simulation.py`` does for one
repetition and one ε of its setting 2 (d = 400, T = 10⁴): β* from ``PRNGKey(20)``, AR(0.1)
contexts and N(0, 0.1²) reward noise drawn up front, then ``SLCB(..., s=10, epsilon=ε,
delta=0.01, eta=1e-4, M=m0).play()``, whose fits run ⌊m0·ln(1 + n·b_max²)⌋ N-IHT iterations
with the paper's calibration and no context clipping. Prints one JSON line: the regret at T
and the time spent in the process after the interpreter started.

Usage: python fliphat_authors_run.py SEED T D K EPSILON M0
"""

import json
import sys
import time

t0 = time.perf_counter()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from SparseBandit.fliphat_simulation_utils import (  # noqa: E402
    SLCB,
    generate_contexts,
    generate_rewards,
)

seed, T, d, K = (int(v) for v in sys.argv[1:5])
eps, m0 = float(sys.argv[5]), float(sys.argv[6])
s_star = 5
key = jax.random.PRNGKey(20)
S = jnp.arange(s_star).astype(jnp.int16)
a = jax.random.uniform(key, minval=0.5, maxval=1.0, shape=(s_star,))
signs = jax.random.rademacher(key, shape=(s_star,))
beta_star = jnp.zeros(d).at[S].set(a * signs)
key = jax.random.PRNGKey(seed)
key, _ = jax.random.split(key)
contexts = generate_contexts(
    key, T=T, K=K, d=d, cov_structure="autoregressive", cov_param=0.1, sigma=1.0
)
key, _ = jax.random.split(key)
rewards, max_rewards, _ = generate_rewards(key, contexts, beta_star, noise_sigma=0.1)
key, _ = jax.random.split(key)
bandit = SLCB(contexts, rewards, max_rewards, beta_star, key, s=10, epsilon=eps, delta=0.01,
              eta=1e-4, M=m0)  # fmt: skip
bandit.play()
regret = float(bandit.regret[-1])
print(
    json.dumps(
        {
            "regret": regret,
            "in_process_s": time.perf_counter() - t0,
            "beta_star_head": [round(float(v), 7) for v in beta_star[:s_star]],
            "jax": jax.__version__,
        }
    )
)
