"""River's shared-context dict ``{feature: value}`` as a row of a policy's d features.

River's contextual policies (``LinUCBDisjoint``) take one context for the round, a dict of
features shared by every arm, and keep one model per arm. Policies of this package that keep
per-arm models (``keyed_by_arm_id``) accept it too; their feature vector has a fixed width d:

* integer keys are column indices (0 … d−1), as in this package's sparse ``{j: value}`` rows;
* other keys are feature names, given columns in order of first appearance (sorted by name
  within the context where they first appear); more than d names is an error. The mapping is
  part of the policy's state (``state_dict``), so a restored policy reads contexts alike.

A context whose values are all numbers is a shared context; ``{arm_id: features}`` (sequences
or mappings as values) is a per-arm context.
"""

from __future__ import annotations

import numbers
from collections.abc import Hashable, Mapping
from typing import Any, TypeGuard

import numpy as np

from ..utils.arrays import FloatArray

__all__ = ["is_shared_context", "shared_row"]


def is_shared_context(context: object) -> TypeGuard[Mapping[Any, Any]]:
    """True for River's ``{feature: number}`` dict (including the empty dict).

    >>> is_shared_context({"age": 0.3, "clicks": 2}), is_shared_context({"a": [1.0, 0.0]})
    (True, False)
    """
    return isinstance(context, Mapping) and all(
        isinstance(v, numbers.Real) for v in context.values()
    )


def shared_row(context: Mapping[Any, Any], d: int, columns: dict[Hashable, int]) -> FloatArray:
    """The (d,) feature row of a shared context; ``columns`` (name → index) grows in place.

    >>> cols = {}
    >>> shared_row({"b": 2.0, "a": 1.0}, 3, cols).tolist(), cols
    ([1.0, 2.0, 0.0], {'a': 0, 'b': 1})
    >>> shared_row({0: 5.0}, 3, {}).tolist()
    [5.0, 0.0, 0.0]
    """
    row = np.zeros(d)
    named = [k for k in context if not isinstance(k, numbers.Integral)]
    if named and len(named) < len(context):
        raise ValueError("a shared context mixes integer columns and feature names")
    if named:
        new = sorted((k for k in named if k not in columns), key=str)
        if len(columns) + len(new) > d:
            raise ValueError(
                f"the shared contexts name more than d = {d} features "
                f"(new: {', '.join(map(str, new[:3]))})"
            )
        for k in new:
            columns[k] = len(columns)
        for k, v in context.items():
            row[columns[k]] = float(v)
    else:
        for j, v in context.items():
            if not 0 <= int(j) < d:
                raise ValueError(f"feature column {j} is outside 0..{d - 1}")
            row[int(j)] = float(v)
    return row
