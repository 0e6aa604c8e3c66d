"""Terminal tables: plain text, right-aligned, wrapped to the terminal's width."""

from __future__ import annotations

from typing import Any

__all__ = ["MIN_COLUMN", "NON_TERMINAL_WIDTH", "format_table", "table_width"]


#: Width of a table written anywhere but a terminal (a file, a pipe); ``COLUMNS`` overrides.
NON_TERMINAL_WIDTH = 200
#: No column is wrapped narrower than this.
MIN_COLUMN = 8


def table_width() -> int:
    """The terminal's width (``COLUMNS`` if set), or :data:`NON_TERMINAL_WIDTH` without one."""
    import shutil

    return max(40, shutil.get_terminal_size((NON_TERMINAL_WIDTH, 24)).columns)


def format_table(headers: list[str], rows: list[list[str]], width: int | None = None) -> str:
    """Plain-text table (``tabulate``), right-aligned, that fits ``width`` columns (default: the
    terminal's, :func:`table_width`): the widest columns are wrapped (at spaces where they can
    be) until the table fits or every column is :data:`MIN_COLUMN` wide.

    >>> print(format_table(["a", "bb"], [["1", "22"], ["333", "4"]]))
      a    bb
    ---  ----
      1    22
    333     4
    >>> print(format_table(["policy", "note"], [["fliphat", "a long note that wraps"]], width=24))
      policy         note
    --------  -----------
     fliphat  a long note
               that wraps
    """
    from tabulate import tabulate

    width = table_width() if width is None else width
    opts: dict[str, Any] = {"tablefmt": "simple", "disable_numparse": True, "stralign": "right"}
    text = tabulate(rows, headers, **opts)
    if max(map(len, text.splitlines()), default=0) <= width:
        return text
    caps = [
        max([len(h), *(len(line) for r in rows for line in str(r[i]).splitlines())])
        for i, h in enumerate(headers)
    ]
    # tabulate pads every column by 2 (its MIN_PADDING) and separates them by 2 spaces
    budget = width - 4 * len(headers) + 2
    while sum(caps) > budget and max(caps) > MIN_COLUMN:
        caps[caps.index(max(caps))] -= 1
    # Wrapped here, not with tabulate's ``maxcolwidths``: tabulate 0.10 re-parses wrapped cells
    # as numbers despite ``disable_numparse`` (``int('1,500')`` raised in the service summary).
    import textwrap

    def wrap(cell: object, cap: int) -> str:
        return "\n".join(
            textwrap.fill(line, cap, break_on_hyphens=False) or line
            for line in str(cell).splitlines() or [""]
        )

    return tabulate(
        [[wrap(c, caps[i]) for i, c in enumerate(r)] for r in rows],
        [wrap(h, caps[i]) for i, h in enumerate(headers)],
        **opts,
    )
