"""`make run` (`dpbandit serve` on its embedded default): seeded, reproducible, and it learns.

The embedded default is a certified FLIPHAT bandit (ε = 1) on a seeded simulated stream; its
summary compares the policy with the uniform random policy and the oracle on the same stream.
"""

import json
import re
import socket
import stat
import tempfile
from pathlib import Path

import pytest

from streaming_dpbandit.cli import main
from streaming_dpbandit.stream.state import DirectoryState

FLAGS = ["serve", "--no-metrics", "--no-progress"]
README = Path(__file__).resolve().parents[2] / "README.md"


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


#: A figure the README quotes from a run: ``<!-- figure RUN KEY -->VALUE``, the HTML comment
#: invisible once rendered. KEY is a dotted path into the run's ``--summary-json`` or a name
#: of DERIVED; VALUE is compared with the run at the precision it is printed with.
FIGURE = re.compile(
    r"<!-- figure (?P<run>[\w-]+) (?P<key>[\w.]+) -->(?P<value>[-\d,.]+)(?P<unit>×?)"
)
MARKER = re.compile(r"<!--\s*figure\b")
DERIVED = {
    "make-run": {
        "regret_ratio": lambda s: (
            s["source"]["pseudo_regret"] / s["source"]["uniform_pseudo_regret"]
        )
    }
}


def readme_figures() -> list[dict]:
    text = README.read_text(encoding="utf-8")
    found = [m.groupdict() for m in FIGURE.finditer(text)]
    assert len(found) == len(MARKER.findall(text)), "a figure marker without a figure after it"
    return found


def value_of(run: str, key: str, summary: dict) -> float:
    if key in DERIVED.get(run, {}):
        return DERIVED[run][key](summary)
    node = summary
    for part in key.split("."):
        node = node[part]
    return float(node)


def check_readme_figures(run: str, summary: dict) -> int:
    """Every README figure of ``run`` equals the run's value printed at its precision."""
    checked = 0
    for fig in readme_figures():
        if fig["run"] != run:
            continue
        quoted = fig["value"].replace(",", "")
        decimals = len(quoted.split(".")[1]) if "." in quoted else 0
        got = value_of(run, fig["key"], summary)
        assert f"{got:.{decimals}f}" == quoted, (
            f"README quotes {fig['value']}{fig['unit']} for {run} {fig['key']}; "
            f"the run gives {got:,.{decimals}f}"
        )
        checked += 1
    return checked


def test_readme_figures_name_runs_and_keys_this_module_checks():
    figures = readme_figures()
    assert {f["run"] for f in figures} == {"make-run"}  # the runs this module makes
    keys = {f"source.{k}" for k in ("pseudo_regret", "uniform_pseudo_regret")} | {
        f"source.{k}" for k in ("mean_expected_reward", "oracle_mean_expected_reward")
    }
    assert {f["key"] for f in figures} <= keys | set(DERIVED["make-run"])


@pytest.mark.slow
def test_embedded_default_regret_at_most_half_the_uniform_policys(tmp_path, capsys):
    # the whole default stream (20,000 events), exactly what `make run` runs
    s = _serve(tmp_path, "full")
    src = s["source"]
    assert src["decisions"] == 20_000
    ratio = src["pseudo_regret"] / src["uniform_pseudo_regret"]
    assert ratio <= 0.5, ratio
    assert "the policy's regret is" in capsys.readouterr().out
    # and the README quotes this run's figures
    assert check_readme_figures("make-run", s) == 5


def test_the_embedded_default_leaves_no_state_behind(tmp_path, monkeypatch, capsys):
    """Its snapshots hold the secret noise key: the temporary state directory is owner-only
    while the run lasts and removed at exit — also when the run fails."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    seen = []
    real = DirectoryState.__init__

    def spy(self, directory, *args, **kwargs):
        if Path(directory).parent == tmp_path and Path(directory).exists():
            seen.append((Path(directory), stat.S_IMODE(Path(directory).stat().st_mode)))
        real(self, directory, *args, **kwargs)

    monkeypatch.setattr(DirectoryState, "__init__", spy)
    assert main([*FLAGS, "--events", "300"]) == 0
    ((state, mode),) = seen
    assert state.parent == tmp_path and state.name.startswith("dpbandit-state-")
    assert mode == 0o700 and not state.exists() and list(tmp_path.iterdir()) == []
    err = capsys.readouterr().err
    assert f"in {state}, a temporary directory removed at exit: give --state-dir DIR" in err
    assert f"removed the temporary state {state}" in err
    # a run that fails at start removes it too
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        assert main(["serve", "--no-progress", "--events", "300", "--metrics-port", port]) == 2
    assert list(tmp_path.iterdir()) == []
    # --state-dir keeps it
    assert main([*FLAGS, "--events", "300", "--state-dir", str(tmp_path / "kept")]) == 0
    assert (tmp_path / "kept" / "ledger.jsonl").is_file()
