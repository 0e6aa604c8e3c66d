"""Errors that stop a service before it serves (DESIGN §5)."""

from __future__ import annotations

import contextlib

__all__ = ["ServiceStartError", "input_overrun", "out_of_memory_is_a_start_error"]


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


def input_overrun(transport: object, directory: object) -> ServiceStartError | None:
    """The error of a finite input that ended before the snapshot's offsets (it is not the
    input the state directory ``directory`` was written from), or None.

    >>> class Ended:
    ...     def overrun(self):
    ...         return {("contexts", 0): (120, 100)}
    >>> print(input_overrun(Ended(), "state"))  # doctest: +ELLIPSIS
    the input ends before the snapshot's offsets (contexts: offset 120 of 100): ...
    """
    overrun = getattr(transport, "overrun", None)
    over = overrun() if overrun is not None else {}
    if not over:
        return None
    where = ", ".join(f"{t}: offset {at} of {n}" for (t, _p), (at, n) in sorted(over.items()))
    return ServiceStartError(
        f"the input ends before the snapshot's offsets ({where}): the state directory "
        f"{directory} was written from a longer input; use this input's state directory, "
        "or a new one"
    )
