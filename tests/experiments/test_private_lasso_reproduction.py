"""``dpbandit reproduce private-lasso --quick`` and the new policies in ``dpbandit simulate``.

The quick profile (seconds, fixed seeds) is a scaled-down version of the full reproduction
(docs/private-lasso.md). Its T2 (non-private √T exponent) and T4 (slopes in d) need horizons the
quick profile does not have: they are shown, labelled "not assessed at this size"; every other
target must pass, and the command exits 0.
"""

import json

import pytest

from streaming_dpbandit.cli import main

ROBUST = {"T1", "T3", "T5", "T6a", "T6b", "T7", "sim", "ledger"}


# the quick T4 grid includes d = 25, where B_x = √8 ≥ b_x√d/2: the spec's dense-feature warning
@pytest.mark.filterwarnings("ignore:dense features")
def test_reproduce_private_lasso_quick(tmp_path, capsys):
    js, png = tmp_path / "rep.json", tmp_path / "rep.png"
    code = main(
        [
            "reproduce",
            "private-lasso",
            "--quick",
            "--no-progress",
            "--jobs",
            "1",
            "--json",
            str(js),
            "--plot",
            str(png),
        ]
    )
    out = capsys.readouterr().out
    assert "comparison at equal" in out and "not a valid DP guarantee" in out
    data = json.loads(js.read_text())
    targets = data["targets"]
    assert {t["target"] for t in targets} >= ROBUST | {"T2", "T4"}
    failed = [t for t in targets if t["target"] in ROBUST and t["passed"] is False]
    assert not failed, "\n".join(f"{t['target']} {t['cell']}: {t['measured']}" for t in failed)
    assert code == 0  # issue 21: T2/T4 at quick horizons are "not assessed at this size"
    for t in targets:
        if t["target"] in ("T2", "T4") and t["passed"] is None:
            assert t["note"].startswith(("not assessed at this size", "support not recovered"))
        assert t["target"] not in ("T2", "T4") or t["passed"] is not False, t
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = data["sections"][0]
    assert table["headers"][:3] == ["d", "T", "seeds"] and len(table["rows"]) == 1


def test_simulate_runs_the_new_policies_on_the_new_environments(capsys):
    code = main(
        [
            "simulate",
            "--env",
            "privatelasso-m",
            "--env-param",
            "d=60",
            "--policy",
            "private-lasso,th-lasso,sa-lasso",
            "--policy-param",
            "refit_every=100",
            "--epsilon",
            "64",
            "--delta",
            "1e-8",
            "--horizon",
            "600",
            "--seeds",
            "1",
            "--jobs",
            "1",
            "--no-progress",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "private-lasso ε=64" in out and "th-lasso" in out
    # the default secure backend: its Gram releases are Rényi-only, so the accountant of
    # record is zCDP (CKS), and the table says which backend drew the noise
    line = next(ln for ln in out.splitlines() if "private-lasso ε=64" in ln)
    assert "(zCDP)" in line and "secure" in line


def test_simulate_paper_variant_is_labelled(capsys):
    argv = [
        "simulate",
        "--env",
        "privatelasso-m",
        "--env-param",
        "d=20",
        "--env-param",
        "base=dense",
    ]
    argv += [
        "--policy",
        "private-lasso",
        "--calibration",
        "paper",
        "--horizon",
        "64",
        "--seeds",
        "1",
    ]
    argv += ["--jobs", "1", "--no-progress", "--delta", "1e-5"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "not DP-valid" in out and "not a valid DP guarantee" in out


def test_explain_private_lasso_prints_the_boundary_constants(capsys):
    argv = ["explain", "--policy", "private-lasso"]
    for kv in [
        "d=10000",
        "s0=5",
        "horizon=1048576",
        "epsilon=1",
        "delta=1e-7",
        "clip_l2=2.8284271",
        "reward_bound=2.4093",
    ]:
        argv += ["--policy-param", kv]
    with pytest.warns(UserWarning, match="1/\\(10·T_max\\)"):  # the spec's own example: δ = 1e-7
        assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    b18 = next(b for b in data["boundaries"] if b["boundary"] == 18)
    assert abs(b18["svt_sigma"] - 0.02094) < 5e-5 and b18["iterations"] == 182
    assert data["l_min"] == 9 and data["n_episodes"] == 11 and "seed" not in data["params"]
