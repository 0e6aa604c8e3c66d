"""Errors of the replay package."""

from __future__ import annotations

__all__ = ["LogFormatError"]


class LogFormatError(ValueError):
    """A logged stream that cannot be used as it is: the message names where and why
    (file, line or row, column, the offending value)."""
