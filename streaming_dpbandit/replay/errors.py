"""Errors of the replay package."""

from __future__ import annotations

from typing import Any

__all__ = ["LogFormatError", "show"]


class LogFormatError(ValueError):
    """A logged stream that cannot be used as it is: the message names where and why
    (file, line or row, column, the offending value)."""


def show(value: Any) -> str:
    """``repr`` of a value as the user wrote it (numpy scalars as plain Python values).

    >>> import numpy as np
    >>> show(np.float64(0.5)), show(np.str_("a")), show("b")
    ('0.5', "'a'", "'b'")
    """
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "ndim", None) == 0:
        value = item()
    return repr(value)
