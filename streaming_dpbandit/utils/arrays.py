"""Array type aliases for annotations (numpy's ``NDArray`` with the dtypes the package uses).

One home for them so that a signature says what it takes: ``FloatArray`` for features, models
and noise (float64), ``IntArray`` for indices and counts, ``BoolArray`` for masks, ``AnyArray``
where the dtype genuinely varies (inputs converted with ``np.asarray``), ``MaybeArray`` for
an optional one. Also
:func:`sorted_distinct`, ``np.unique`` without its import of ``numpy.ma`` (hot paths of a
short simulation, issue 24).

>>> import numpy as np
>>> def total(x: FloatArray) -> float:
...     return float(x.sum())
>>> total(np.ones(3))
3.0
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
AnyArray = npt.NDArray[Any]
ArrayLike = npt.ArrayLike
#: An optional array argument (``learn``'s ``ids``).
MaybeArray = ArrayLike | None

__all__ = [
    "AnyArray",
    "ArrayLike",
    "BoolArray",
    "FloatArray",
    "IntArray",
    "MaybeArray",
    "sorted_distinct",
]


def sorted_distinct(a: AnyArray) -> AnyArray:
    """The distinct values of a 1-d array, sorted: ``np.unique(a)`` (which imports ``numpy.ma``,
    ≈ 10 ms, on its first call) for arrays without NaN.

    >>> sorted_distinct(np.array([3, 1, 3, 2, 1])).tolist(), sorted_distinct(np.array([])).size
    ([1, 2, 3], 0)
    """
    s = np.sort(a)
    if s.size < 2:
        return s
    return s[np.r_[True, s[1:] != s[:-1]]]
