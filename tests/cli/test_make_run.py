"""`make run` (`dpbandit serve` on its embedded default): seeded, reproducible, and it learns.

The embedded default is a certified FLIPHAT bandit (ε = 1) on a seeded simulated stream; its
summary compares the policy with the uniform random policy and the oracle on the same stream.
"""

import json

import pytest

from streaming_dpbandit.cli import main

FLAGS = ["serve", "--no-metrics", "--no-progress"]


def _serve(tmp_path, name, *extra):
    out = tmp_path / f"{name}.json"
    assert main([*FLAGS, "--summary-json", str(out), *extra]) == 0
    return json.loads(out.read_text())


def _figures(summary):
    b = summary["bandits"]["default"]
    return summary["source"], b["stats"], b["mean_reward_window"], b["model_version"]


def test_embedded_default_same_figures_on_every_run(tmp_path, capsys):
    a = _serve(tmp_path, "a", "--events", "2500")
    b = _serve(tmp_path, "b", "--events", "2500")
    assert _figures(a) == _figures(b)
    src = a["source"]
    # the references are the uniform policy's expectation and the oracle on the same contexts
    assert src["oracle_mean_expected_reward"] > src["mean_expected_reward"]
    assert src["uniform_pseudo_regret"] == pytest.approx(
        2500 * (src["oracle_mean_expected_reward"] - src["uniform_mean_expected_reward"])
    )
    out = capsys.readouterr().out
    assert "uniform random arm (expected)" in out and "oracle: best arm every time" in out
    assert "last 1,000 rewards the service joined" in out


@pytest.mark.slow
def test_embedded_default_regret_at_most_half_the_uniform_policys(tmp_path, capsys):
    # the whole default stream (20,000 events), exactly what `make run` runs
    s = _serve(tmp_path, "full")
    src = s["source"]
    assert src["decisions"] == 20_000
    ratio = src["pseudo_regret"] / src["uniform_pseudo_regret"]
    assert ratio <= 0.5, ratio
    assert "the policy's regret is" in capsys.readouterr().out
