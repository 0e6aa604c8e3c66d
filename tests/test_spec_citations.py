"""Every citation of a spec resolves inside the repository (docs/specs/README.md).

The code and the docs cite the project's design documents as ``spec §N`` (the spec of the paper
the file implements, named in its docstring or heading as ``docs/specs/<paper>.md``), as
``FLIPHAT spec §N`` and the like, or as ``DESIGN §N``. A clone has no ``../shared`` directory:
no file may point there or at a build machine's absolute path.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPECS = ROOT / "docs" / "specs"
QUALIFIED = re.compile(r"(FLIPHAT|DP-LinUCB|PrivateLASSO|LDP-GLB|DP-matroid) spec §")
NAMED = re.compile(r"(?:docs/)?specs/(\w+\.md)")
MACHINE = re.compile(r"\.\./shared/(?:specs|seeds|DESIGN)|/work/(?:main|shared|wt)\b|/check/work\b")


def sources() -> list[Path]:
    out = [ROOT / "README.md"]
    for d in ("streaming_dpbandit", "tests", "bench", "docs", "scripts"):
        out += [p for p in (ROOT / d).rglob("*") if p.suffix in (".py", ".md", ".sh")]
    return [p for p in out if SPECS not in p.parents and p.name != Path(__file__).name]


def unqualified(text: str) -> int:
    return sum(
        1
        for m in re.finditer(r"spec §", text)
        if not QUALIFIED.search(text[max(0, m.start() - 20) : m.end()])
    )


def test_the_specs_are_in_the_repository():
    names = {p.name for p in SPECS.glob("*.md")}
    assert {"fliphat.md", "dp_linucb_tree.md", "privatelasso.md", "ldp_glb.md"} <= names
    assert {"dp_matroid.md", "DESIGN.md", "README.md"} <= names
    for p in SPECS.glob("*.md"):
        assert not MACHINE.search(p.read_text()), p.name


def test_every_spec_citation_names_a_spec_that_exists():
    missing, dangling = [], []
    for p in sources():
        text = p.read_text(errors="replace")
        named = set(NAMED.findall(text))
        dangling += [f"{p.relative_to(ROOT)}: {n}" for n in named if not (SPECS / n).exists()]
        if unqualified(text) and not named:
            missing.append(str(p.relative_to(ROOT)))
    assert not missing, f"'spec §' without naming docs/specs/<paper>.md: {missing}"
    assert not dangling, dangling


def test_no_file_points_outside_the_clone():
    bad = [
        f"{p.relative_to(ROOT)}: {m.group(0)}"
        for p in sources()
        for m in MACHINE.finditer(p.read_text(errors="replace"))
    ]
    assert not bad, bad
