"""The README's Python example runs as written (a doctest of README.md)."""

from __future__ import annotations

import doctest
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_examples_run():
    flags = doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS
    result = doctest.testfile(str(README), module_relative=False, optionflags=flags)
    assert result.attempted >= 10 and result.failed == 0, result
