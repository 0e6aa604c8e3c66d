"""What ``/metrics`` reveals, said exactly (issue 19, item 10).

The README said raw sums never appear in metrics while ``/metrics`` exported
``dpbandit_reward_sum``. The reward metrics are exact functions of the joined rewards: they are
declared in ``RAW_REWARD_METRICS``, documented as outside the DP guarantee in the README and in
docs/metrics.md, and ``dpbandit_reward_sum`` is exactly what the docs say it is.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from dpbandit_testing.stream_helpers import BANDIT, dead_letters, record_stream, run_file
from streaming_dpbandit.metrics import RAW_REWARD_METRICS, ServiceMetrics

ROOT = Path(__file__).resolve().parents[2]


def _section(text: str, start: str, end: str) -> str:
    return text[text.index(start) : text.index(end, text.index(start))]


def test_every_reward_derived_metric_is_declared():
    names = {m.name for m in ServiceMetrics().registry.collect()}
    # (dpbandit_simulated_pseudo_regret: the embedded simulation's true regret, no real users)
    derived = {n for n in names if ("reward" in n or "regret" in n) and "simulated" not in n}
    assert derived == set(RAW_REWARD_METRICS)


def test_the_readme_says_what_metrics_carry():
    privacy = _section((ROOT / "README.md").read_text(), "## Privacy, in short", "\n## ")
    flat = " ".join(privacy.split())
    for sentence in re.split(r"(?<=[.!?])\s", flat):
        if "raw sums" in sentence and "never" in sentence:
            assert "metrics" not in sentence, sentence  # the old, untrue claim
    for name in RAW_REWARD_METRICS:
        assert f"`{name}`" in privacy, name
    assert "outside the DP guarantee" in flat


def test_docs_metrics_marks_each_reward_metric_as_not_private():
    text = (ROOT / "docs" / "metrics.md").read_text()
    rows = {
        line.split("|")[1].strip(" `"): line for line in text.splitlines() if line.startswith("| `")
    }
    for name in RAW_REWARD_METRICS:
        assert "not differentially private" in rows[name], name
    reveals = " ".join(_section(text, "**What `/metrics` reveals.**", "\n\n").split())
    for name in RAW_REWARD_METRICS:
        assert f"`{name}`" in reveals, name


def test_reward_sum_is_the_sum_of_the_joined_rewards_as_received(tmp_path):
    path = tmp_path / "stream.jsonl"
    record_stream(path, 800, seed=8, state_dir=tmp_path / "rec")
    svc, transport, _ = run_file(tmp_path / "state", path)
    dead = {d["offset"] for d in dead_letters(transport) if d["source_topic"].endswith("feedback")}
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    values = [x["value"] for x in lines if x["topic"] == "feedback"]
    feedback = [v if isinstance(v, dict) else json.loads(v) for v in values]
    expected = [f["reward"] for off, f in enumerate(feedback) if "reward" in f and off not in dead]
    got = svc.metrics.registry.get_sample_value("dpbandit_reward_sum", {"bandit": BANDIT})
    assert svc.bandits[BANDIT].stats["joined"] > 500
    assert len(expected) == svc.bandits[BANDIT].stats["joined"]
    assert got == pytest.approx(math.fsum(expected), rel=1e-12, abs=1e-9)  # (summation order)
