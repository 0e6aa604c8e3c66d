"""The docs state the product as it is: every stored result they name exists, a table of measured
figures (means with their errors, ``±``) names its command, date, commit and JSON, and no doc
dates a figure by who measured it ("this session", "last session") instead of by date and
commit."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md")) + sorted((ROOT / "docs" / "privacy").glob("*.md"))
PAGES = [ROOT / "README.md", *DOCS]

#: a stored result: a path under docs/ or a Markdown link to a JSON file
STORED = re.compile(r"docs/[\w./-]+\.json|\]\(([\w./-]+\.json)\)")
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
COMMIT = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b")
JSON = re.compile(r"[\w./-]+\.json")
MEASURED = re.compile(r"\d\s?±\s?\d")  # a mean and its error
SESSION = re.compile(r"\b(this|last|next|previous|latest|earlier|later|helper)\s+sessions?\b", re.I)


#: Measured tables whose run kept no JSON (the figures stand as measured; a re-run with --json
#: sources them and leaves this list): (page, section heading) → what they lack.
UNSOURCED = {
    ("docs/dp-linucb.md", "## Batching: what it does, and to regret"): "date, commit, JSON",
    ("docs/dp-linucb.md", "## Reproduction (Experiment 2/3)"): "date, commit, JSON",
    ("docs/dp-linucb.md", "### Where the time goes, memory, noise, BLT"): "date, commit, JSON",
    (
        "docs/dp-matroid.md",
        "## Reproduction (`dpbandit reproduce dp-matroid`)",
    ): "date, commit, JSON",
    (
        "docs/fliphat.md",
        "## Reproduction of the paper (`dpbandit reproduce fliphat`)",
    ): "date, commit, JSON",
    ("docs/fliphat.md", "## The certified calibration on the same environment"): "commit, JSON",
    ("docs/private-lasso.md", "### The comparison table (issue 8)"): "date, commit, JSON",
    (
        "docs/privacy/fliphat-noise-reduction.md",
        "### The default G, chosen on a tuning environment",
    ): "date, commit, JSON",
    (  # the heading's "spec §14.3" is docs/specs/fliphat.md's
        "docs/privacy/fliphat-noise-reduction.md",
        "## 4. First episode length (`first_episode_len = N₀`, spec §14.3) — unchanged default",
    ): "date, commit, JSON",
}


def stored_results(text: str) -> list[str]:
    return [m.group(1) or m.group(0) for m in STORED.finditer(text)]


def measured_tables(text: str) -> list[tuple[int, str]]:
    """(line, section text before the table) of each table whose cells hold ``m ± e`` figures:
    Markdown tables and the fixed-width tables of the commands' output in code blocks."""
    lines = text.splitlines()
    out, section, fence, start = [], 0, False, 0  # (section: the line of its heading)
    for i, line in enumerate(lines):
        if line.startswith("```"):
            if (
                fence
                and "±" in "\n".join(lines[start:i])
                and re.search(r"^-{3,}(\s+-{3,})+$", "\n".join(lines[start:i]), re.M)
            ):
                out.append((start + 1, "\n".join(lines[section:start])))
            fence, start = not fence, i
        elif not fence and line.startswith("#"):
            section = i
        elif not fence and line.startswith("|") and MEASURED.search(line):
            head = i
            while head > 0 and lines[head - 1].startswith("|"):
                head -= 1
            if not out or out[-1][0] != head + 1:
                out.append((head + 1, "\n".join(lines[section:head])))
    return out


def provenance_missing(context: str) -> list[str]:
    """What a measured table's section does not name (command, date, commit, JSON)."""
    checks = {"command": "`" in context, "date": DATE, "commit": COMMIT, "JSON": JSON}
    return [
        what
        for what, check in checks.items()
        if not (check if isinstance(check, bool) else check.search(context))
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_stored_result_a_page_names_exists(page):
    missing = [
        name
        for name in stored_results(page.read_text(encoding="utf-8"))
        if not ((ROOT / name).exists() or (page.parent / name).exists())
    ]
    assert missing == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_dates_a_figure_by_session(page):
    assert SESSION.findall(page.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("page", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_measured_table_names_command_date_commit_and_json(page):
    name = str(page.relative_to(ROOT))
    bare = {
        (name, ctx.splitlines()[0] if ctx else ""): what
        for _line, ctx in measured_tables(page.read_text(encoding="utf-8"))
        if (what := provenance_missing(ctx))
    }
    listed = {key for key in UNSOURCED if key[0] == name}
    assert set(bare) - listed == set(), "a measured table without its provenance"
    assert listed - set(bare) == set(), "sourced since: take it off UNSOURCED"


def test_the_checks_can_fail():
    assert stored_results("cells in `docs/nope.json`, see [x](y.json)") == [
        "docs/nope.json",
        "y.json",
    ]
    assert SESSION.findall("re-run in the latest session") and not SESSION.findall("a session id")
    page = "## A\n\nrun it\n\n| a | b |\n|---|---|\n| 1 ± 2 | 3 |\n"
    assert provenance_missing(measured_tables(page)[0][1]) == ["command", "date", "commit", "JSON"]
    sourced = "## A\n\n*Source:* `cmd`; 2026-11-27; commit `ce8d775`; `docs/f.json`.\n\n```\n"
    sourced += " a      b\n---  -----\n  1  2 ± 3\n```\n"
    assert provenance_missing(measured_tables(sourced)[0][1]) == []
