"""The embedded default: the bandit ``dpbandit serve`` runs with no Kafka, no file, no bandit.

A seeded demo on the simulated stream of ``simulation.env`` (not a production setting: a seeded
DP noise key is public): FLIPHAT for a contextual environment, DPTS-MAT for a slate one.
"""

from __future__ import annotations

from ..errors import ConfigError

__all__ = ["embedded_bandits"]


def embedded_bandits(sim: dict) -> tuple[dict, str]:
    """``bandits`` settings for the simulation source ``sim`` and the note announcing them."""
    from ..envs import MATROID_REGISTRY
    from ..envs import REGISTRY as ENVS

    if sim["env"] in MATROID_REGISTRY:
        return _slate_bandit(sim)
    env_cls = ENVS.get(sim["env"])
    if env_cls is None:
        raise ConfigError(f"simulation.env: unknown environment {sim['env']!r}")
    try:
        env = env_cls(**sim["env_params"])
    except (TypeError, ValueError) as err:
        raise ConfigError(f"simulation.env_params: {err}") from None
    policy = {
        "policy": "fliphat",
        "d": env.d,
        "s": 10,
        "epsilon": 1.0,
        "delta": 1e-6,
        "b_max": round(getattr(env, "b_max", 1.0), 6),
        "first_episode_len": 256,
        "swap_delay": 250,
    }
    # seeded, so every run of the demo prints the same figures
    bandit = {"policy": policy, "feedback_window": 2.0, "seed": sim["seed"]}
    note = (
        f"embedded default: bandit {sim['bandit_id']!r} runs FLIPHAT (certified, "
        f"ε=1, δ=1e-6; b_max = the simulated environment's ‖β*‖₁) on a seeded stream "
        f"(seed {sim['seed']}); a seeded demo, not a production setting"
    )
    return {sim["bandit_id"]: bandit}, note


def _slate_bandit(sim: dict) -> tuple[dict, str]:
    """Default bandit of the embedded simulation on a slate environment: DPTS-MAT, certified."""
    env = slate_environment(sim["env"], sim["env_params"])
    policy = {
        "policy": "dpts-mat",
        "matroid": env.matroid.describe(),
        "epsilon": 1.0,
        "update_every": 64,
    }
    window = 2.0
    # rows of rounds ≤ t − lag are read at round t: cover the window and the source's
    # 256-event polls, so the service rarely waits for feedback
    lag = int((window + 256 * sim["seconds_between_events"]) / sim["seconds_between_events"]) + 64
    bandit = {"policy": policy, "feedback_window": window, "feedback_lag_rounds": lag}
    note = (
        f"embedded default: bandit {sim['bandit_id']!r} runs DPTS-MAT (certified, ε=1) on "
        f"{env.name} (L={env.n_items}, K={env.K}), slates with per-item feedback"
    )
    return {sim["bandit_id"]: bandit}, note


def slate_environment(name: str, env_params: dict):
    """A slate (matroid) environment of the embedded simulation; the simulation section's
    default ``env_params`` belong to the default contextual environment and are not passed."""
    from ..envs import MATROID_REGISTRY
    from ..errors import ConfigError
    from .models import SimulationSource

    params = {} if env_params == SimulationSource().env_params else env_params
    try:
        return MATROID_REGISTRY[name](**params)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"simulation.env_params: {err}") from None
