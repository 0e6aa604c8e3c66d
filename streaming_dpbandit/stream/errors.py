"""Errors that stop a service before it serves (DESIGN §5)."""

from __future__ import annotations

import contextlib

__all__ = ["ServiceStartError", "out_of_memory_is_a_start_error"]


class ServiceStartError(RuntimeError):
    """The service cannot start safely (changed configuration, damaged state, no broker)."""


@contextlib.contextmanager
def out_of_memory_is_a_start_error(what: str):
    """Turn a failed allocation while building a bandit (e.g. ``d: 1000000000``) into a
    :class:`ServiceStartError`: one line naming the bandit and the size, not a traceback.

    >>> with out_of_memory_is_a_start_error("bandit 'shop'"):
    ...     raise MemoryError("cannot allocate 8 TB")
    Traceback (most recent call last):
    ...
    streaming_dpbandit.stream.errors.ServiceStartError: bandit 'shop': its state does not fit ...
    """
    try:
        yield
    except MemoryError as err:  # numpy's ArrayMemoryError included
        raise ServiceStartError(
            f"{what}: its state does not fit in memory ({err}); lower its dimension d"
        ) from None
