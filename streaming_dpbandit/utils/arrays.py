"""Array type aliases for annotations (numpy's ``NDArray`` with the dtypes the package uses).

One home for them so that a signature says what it takes: ``FloatArray`` for features, models
and noise (float64), ``IntArray`` for indices and counts, ``BoolArray`` for masks, ``AnyArray``
where the dtype genuinely varies (inputs converted with ``np.asarray``).

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

__all__ = ["AnyArray", "ArrayLike", "BoolArray", "FloatArray", "IntArray"]
