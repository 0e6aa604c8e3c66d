"""``dpbandit reproduce dp-matroid --quick`` (DP-matroid spec §11.5, §12 seeded statistical tests):
Q1 at ε = 2 with 10 seeds, the Q3 ordering over ε ∈ {10⁻⁴, 2, 10⁵} and the approach to the
non-private baselines, a 5-point Q2 sweep, Q5, no lock-in, and the exact checks of §11.6.
Runs with --jobs 1 (about a minute on one core).

Spec: docs/specs/dp_matroid.md.
"""

import json

import numpy as np
import pytest

from streaming_dpbandit.cli import main
from streaming_dpbandit.envs import MovieLensMatroidEnv, load_movielens_1m
from streaming_dpbandit.envs.movielens import GENRES


@pytest.mark.slow
def test_reproduce_dp_matroid_quick(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("DPBANDIT_MOVIELENS_DIR", raising=False)
    out = tmp_path / "rep.json"
    rc = main(
        ["reproduce", "dp-matroid", "--quick", "--jobs", "1", "--no-progress", "--json", str(out)]
    )
    text = capsys.readouterr().out
    data = json.loads(out.read_text())
    scored = [c for c in data["targets"] if c["passed"] is not None]
    failed = [c for c in scored if not c["passed"]]
    assert not failed, "\n".join(f"{c['target']} {c['cell']}: {c['measured']}" for c in failed)
    assert rc == 0
    names = [c["target"] for c in scored]
    assert names.count("Q1") == 2 and names.count("Q2") == 2 and names.count("Q3") == 6
    assert names.count("Q5") == 2 and "exact" in names and "no lock-in" in names
    assert "not ε-DP" in text and "MovieLens-1M skipped" in text  # labelled; no data, no download
    s1 = {r["key"]: r for r in data["sections"]["S1S2"]["runs"]}
    assert len(s1["dpucb-mat ε=2"]["runs"]) == 10  # Q1 with ≥ 10 seeds


def test_reproduce_dp_matroid_refuses_a_missing_movielens_dir(tmp_path, capsys):
    rc = main(["reproduce", "dp-matroid", "--quick", "--movielens", str(tmp_path)])
    assert rc == 2 and "no ratings.dat" in capsys.readouterr().err


# -- the MovieLens loader on a tiny generated file in the same format -----------------------
def write_fixture(d, n_movies=30, n_users=40, seed=0):
    rng = np.random.default_rng(seed)
    movies = []
    for m in range(1, n_movies + 1):
        gs = sorted(rng.choice(GENRES, size=rng.integers(1, 4), replace=False).tolist())
        movies.append(f"{m}::Movie {m} (19{50 + m % 50})::{'|'.join(gs)}")
    movies.append("999::Caf\xe9 Lumi\xe8re (1999)::Drama")  # latin-1 title
    (d / "movies.dat").write_bytes(("\n".join(movies) + "\n").encode("latin-1"))
    rows = []
    for u in range(1, n_users + 1):
        for m in rng.choice(n_movies, size=rng.integers(3, 15), replace=False) + 1:
            rows.append(f"{u}::{m}::{rng.integers(1, 6)}::{978300000 + len(rows)}")
    rows.append(f"{n_users}::999::4::978301000")
    (d / "ratings.dat").write_text("\n".join(rows) + "\n", encoding="latin-1")
    return movies, rows


def test_movielens_loader_builds_the_thesis_setup(tmp_path):
    movies, rows = write_fixture(tmp_path)
    data = load_movielens_1m(tmp_path / "ratings.dat", tmp_path / "movies.dat")
    assert data.n_users == 40 and data.titles[999].startswith("Café")
    env = MovieLensMatroidEnv(data, n_items=10)
    counts = {}
    for r in rows:
        m = int(r.split("::")[1])
        counts[m] = counts.get(m, 0) + 1
    want = sorted(counts, key=lambda m: (-counts[m], m))[:10]  # ties by ascending MovieID
    assert env.movie_ids.tolist() == want
    assert np.allclose(env.means, [counts[m] / 40 for m in want])
    for i, m in enumerate(want):  # canonical genre order, from movies.dat
        gs = movies[m - 1].split("::")[2].split("|")
        assert env.vectors[i].tolist() == [1.0 if g in gs else 0.0 for g in GENRES]
    assert env.K == np.linalg.matrix_rank(env.vectors)
    w = env.draw(np.random.default_rng(0), 500)  # one random user per round: 1 if they rated e
    assert set(np.unique(w)) <= {0.0, 1.0}
    assert np.abs(w.mean(axis=0) - env.means).max() < 4 * 0.5 / np.sqrt(500)


@pytest.mark.parametrize(
    "ratings, movies, message",
    [
        ("1::1::5::0\n", "1::A::Comedy|Space Opera\n", "unknown genre"),
        ("1::2::5::0\n", "1::A::Comedy\n", "missing from"),
        ("1::1::5\n", "1::A::Comedy\n", "UserID::MovieID"),
    ],
)
def test_movielens_loader_rejects_bad_files(tmp_path, ratings, movies, message):
    (tmp_path / "ratings.dat").write_text(ratings, encoding="latin-1")
    (tmp_path / "movies.dat").write_text(movies, encoding="latin-1")
    with pytest.raises(ValueError, match=message):
        load_movielens_1m(tmp_path / "ratings.dat", tmp_path / "movies.dat")


def test_reproduction_runs_the_movielens_section_on_user_data(tmp_path):
    """With a (tiny, generated) data directory the MovieLens section runs and is reported."""
    from streaming_dpbandit.experiments.dp_matroid import QUICK, run_reproduction

    write_fixture(tmp_path, n_movies=120, n_users=60, seed=1)
    import dataclasses

    prof = dataclasses.replace(
        QUICK,
        horizon=300,
        seeds_q1=2,
        seeds=2,
        sweep=(1.0, 2.0),
        seeds_sweep=2,
        movielens_horizon=200,
        seeds_movielens=1,
    )
    rep = run_reproduction(prof, movielens_dir=tmp_path)
    ml = [c for c in rep.checks if c.target in ("Q6",) or c.cell == "MovieLens-1M setup"]
    assert len(ml) == 4 and "MovieLens" in rep.sections
    setup = next(c for c in rep.checks if c.cell == "MovieLens-1M setup")
    assert setup.passed is False  # a toy file is not MovieLens-1M: rank and Table 6.2 differ
    assert "MovieLens-1M:" in rep.text()


def test_cli_explain_and_simulate_for_slate_policies(capsys):
    rc = main(
        [
            "explain",
            "--policy",
            "dpucb-mat",
            "--policy-param",
            'matroid={"type": "uniform", "n_items": 100, "k": 17}',
            "--policy-param",
            "epsilon=2",
            "--policy-param",
            "calibration=paper",
            "--policy-param",
            "exploration=thesis",
            "--horizon",
            "20000",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["epsilon0"] == pytest.approx(2 / 17) and out["epsilon_certified"] == 4
    assert out["exploration"] == "thesis"
    assert out["privacy_bonus_at_t"]["by_T"]["1"] == pytest.approx(325, abs=0.5)  # spec §6.5
    assert "2ε-DP" in out["label"]
    assert main(["simulate", "--policy", "dpts-mat"]) == 2
    assert "reproduce dp-matroid" in capsys.readouterr().err


def test_reproduction_plot_has_no_empty_subplot_and_labels_its_bars(tmp_path, monkeypatch):
    """Issue 21: the quick profile skips S3; its plot has no empty frame for it, and the error
    bars say what they are."""
    import dataclasses

    import matplotlib.figure

    from streaming_dpbandit.experiments.dp_matroid import QUICK, run_reproduction

    prof = dataclasses.replace(QUICK, horizon=200, seeds_q1=2, seeds=2, sweep=(1.0, 2.0))
    prof = dataclasses.replace(prof, seeds_sweep=2)
    rep = run_reproduction(prof)
    assert "s3" not in rep.extras
    saved = []
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda fig, *a, **k: saved.append(fig))
    rep.plot(str(tmp_path / "rep.png"))
    (fig,) = saved
    assert len(fig.axes) == 3  # S1/S2 for each algorithm and the S4 sweep
    for ax in fig.axes:
        assert ax.lines or ax.collections, f"empty subplot {ax.get_title()!r}"
    s4 = next(ax for ax in fig.axes if ax.get_title() == "S4")
    assert all("95% CI" in t.get_text() for t in s4.get_legend().get_texts())
