"""Logging set-up: plain or JSON lines on stderr. Log records never carry raw features, rewards,
noise, seeds or sums — only counts, identifiers of releases and configuration facts.

With ``json_lines`` every line on stderr is one JSON object (``python-json-logger``): ``ts``,
``level``, ``logger``, ``msg`` and, as keys of their own, the structured fields a record carries
(:data:`FIELDS`: ``bandit``, ``release_id``, ``model_version``, ``partition``, ...), passed as
``log.info(..., extra={"bandit": name})``. Python warnings are routed through the same handler
(one line, no file path), and a line is written above a live progress bar, never glued to it.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import warnings
from collections.abc import Iterator
from typing import IO, ClassVar, TextIO

__all__ = ["FIELDS", "cli_logger", "scoped_logging", "setup_logging"]

#: Structured fields that records may carry as ``extra`` (JSON keys of their own).
FIELDS = ("bandit", "release_id", "model_version", "partition", "partitions", "url", "category")

_ROOT = "streaming_dpbandit"


class _BarSafeHandler(logging.StreamHandler[TextIO]):
    """A stderr handler that writes each record on a line of its own above any live tqdm bar."""

    def emit(self, record: logging.LogRecord) -> None:
        tqdm_mod = sys.modules.get("tqdm")
        bars = getattr(getattr(tqdm_mod, "tqdm", None), "_instances", None)
        if not bars or tqdm_mod is None:
            super().emit(record)
            return
        try:
            tqdm_mod.tqdm.write(self.format(record), file=self.stream)
        except Exception:  # logging must never raise
            self.handleError(record)


class _PlainFormatter(logging.Formatter):
    """Plain lines; the command line's notes and Python warnings read ``note: ...`` and
    ``warning: ...``."""

    PREFIX: ClassVar[dict[str, str]] = {f"{_ROOT}.cli": "note", f"{_ROOT}.warnings": "warning"}

    def format(self, record: logging.LogRecord) -> str:
        prefix = self.PREFIX.get(record.name)
        if prefix is not None:
            return f"{prefix}: {record.getMessage()}"
        return super().format(record)


def _json_formatter() -> logging.Formatter:
    from pythonjsonlogger.json import JsonFormatter

    return JsonFormatter(
        "%(asctime)s %(levelname)s %(name)s %(message)s",
        rename_fields={"asctime": "ts", "levelname": "level", "name": "logger", "message": "msg"},
        datefmt="%Y-%m-%dT%H:%M:%S%z",
        json_ensure_ascii=False,
    )


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: IO[str] | None = None,
    line: str | None = None,
) -> None:
    """``warnings.showwarning`` replacement: one log record, no source path or line."""
    text = str(message).splitlines()[0] if str(message) else category.__name__
    logging.getLogger(f"{_ROOT}.warnings").warning(text, extra={"category": category.__name__})


def setup_logging(level: str = "INFO", json_lines: bool = False, timestamps: bool = True) -> None:
    """Route the package's log records (and Python warnings) to stderr.

    ``timestamps=False`` gives the short form of the one-shot commands (``WARNING: ...``).

    >>> with scoped_logging():  # setup_logging("WARNING", timestamps=False), then restored
    ...     logging.getLogger("streaming_dpbandit").handlers[0].formatter._fmt
    '%(levelname)s: %(message)s'
    """
    handler = _BarSafeHandler(sys.stderr)
    if json_lines:
        handler.setFormatter(_json_formatter())
    elif timestamps:
        handler.setFormatter(_PlainFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    else:
        handler.setFormatter(_PlainFormatter("%(levelname)s: %(message)s"))
    root = logging.getLogger(_ROOT)
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False
    kafka = logging.getLogger("kafka")
    kafka.setLevel(logging.WARNING)
    if json_lines:  # the client library's own warnings are stderr lines too: JSON as well
        kafka.handlers[:] = [handler]
        kafka.propagate = False
    if _warnings_not_recorded():
        warnings.showwarning = _show_warning


def _warnings_not_recorded() -> bool:
    """False while a caller records warnings (``warnings.catch_warnings(record=True)``,
    ``pytest.warns``): they stay theirs, not routed to logging."""
    impl = getattr(warnings, "_showwarnmsg_impl", None)
    return getattr(impl, "__module__", None) == "warnings"


@contextlib.contextmanager
def scoped_logging(level: str = "WARNING") -> Iterator[None]:
    """Plain short-form logging and warnings-through-logging for the duration of one command
    (``dpbandit`` calls); the previous handlers and ``warnings.showwarning`` come back after."""
    root = logging.getLogger(_ROOT)
    kafka = logging.getLogger("kafka")
    saved = (
        list(root.handlers),
        root.level,
        root.propagate,
        list(kafka.handlers),
        kafka.level,
        kafka.propagate,
        warnings.showwarning,
    )
    setup_logging(level, json_lines=False, timestamps=False)
    try:
        yield
    finally:
        root.handlers[:], root.level, root.propagate = saved[0], saved[1], saved[2]
        kafka.handlers[:], kafka.level, kafka.propagate = saved[3], saved[4], saved[5]
        warnings.showwarning = saved[6]


def cli_logger() -> logging.Logger:
    """The logger of the command line's notes (``note: ...`` lines in plain mode)."""
    return logging.getLogger(f"{_ROOT}.cli")
