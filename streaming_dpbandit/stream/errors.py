"""Errors that stop a service before it serves (DESIGN §5)."""

from __future__ import annotations

import contextlib
import json
from typing import Any

__all__ = [
    "ServiceStartError",
    "input_overrun",
    "out_of_memory_is_a_start_error",
    "refuse_changed_policy",
]


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


def refuse_changed_policy(name: str, bandit: Any, fingerprint: str) -> None:
    """Refuse to resume bandit ``name`` (its ``BanditSettings``) from a snapshot written under
    another policy configuration (its ``fingerprint``): one line naming each changed field with
    the snapshot's value, so that a user whose default changed with an upgrade can set it back.

    >>> from streaming_dpbandit.settings import BanditSettings
    >>> b = BanditSettings.model_validate({"policy": {"policy": "fliphat", "d": 4, "s": 1}})
    >>> refuse_changed_policy("shop", b, b.fingerprint())  # the same configuration
    >>> old = b.fingerprint().replace('"eta":"auto"', '"eta":0.0001')
    >>> refuse_changed_policy("shop", b, old)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    streaming_dpbandit.stream.errors.ServiceStartError: the policy configuration of bandit 'shop' \
changed since the snapshot (eta: the snapshot has 0.0001); restore the old configuration (a \
default may have changed: set the snapshot's value explicitly) or start a new state directory
    """
    changed = bandit.changes_since(fingerprint)
    if not changed:
        return
    then = json.loads(fingerprint)
    said = ", ".join(
        f"{k}: the snapshot has {json.dumps(then[k])}" if k in then else k for k in changed
    )
    raise ServiceStartError(
        f"the policy configuration of bandit {name!r} changed since the snapshot ({said}); "
        "restore the old configuration (a default may have changed: set the snapshot's value "
        "explicitly) or start a new state directory"
    )
