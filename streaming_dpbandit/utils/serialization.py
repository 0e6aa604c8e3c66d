"""Safe, exact serialisation of policy state (snapshots): JSON with tagged numpy arrays.

Unlike pickle, loading never executes code. Floats round-trip exactly (arrays are stored as
raw little-endian bytes, base64-encoded; Python floats with ``repr`` precision), integers of
any size are kept (Python ints, including exact accumulator sums), and tuples come back as lists.

>>> import numpy as np
>>> state = {"t": 3, "beta": np.array([0.1, -2.5]), "idx": np.array([4, 9]), "big": 2**80}
>>> back = loads(dumps(state))
>>> back["t"], back["beta"].tolist(), back["idx"].dtype.kind, back["big"] == 2**80
(3, [0.1, -2.5], 'i', True)
"""

from __future__ import annotations

import base64
import json
import math
from typing import Any

import numpy as np

__all__ = ["dumps", "loads"]

_TAG = "__ndarray__"
_FLOAT = "__float__"


def _encode(obj: Any) -> Any:  # JSON-like values
    if isinstance(obj, np.ndarray):
        if obj.dtype == object:
            data = obj.ravel().tolist()
            if not all(type(x) is int for x in data):  # exact integer sums: already JSON
                data = [_encode(x) for x in data]
            return {_TAG: "object", "shape": list(obj.shape), "data": data}
        arr = np.ascontiguousarray(obj)
        dtype = arr.dtype.newbyteorder("<") if arr.dtype.byteorder == ">" else arr.dtype
        return {
            _TAG: dtype.str,
            "shape": list(arr.shape),
            "data": base64.b64encode(arr.astype(dtype, copy=False).tobytes()).decode("ascii"),
        }
    if isinstance(obj, np.generic):
        return _encode(obj.item())
    if isinstance(obj, float) and not math.isfinite(obj):
        return {_FLOAT: repr(obj)}
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            if not isinstance(k, str):
                raise TypeError(f"state keys must be strings, got {type(k).__name__} {k!r}")
            out[k] = _encode(v)
        return out
    if isinstance(obj, (list, tuple)):
        if set(map(type, obj)) <= {str}:  # e.g. the ids a join remembers: already JSON
            return list(obj)
        return [_encode(v) for v in obj]
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(f"cannot serialise {type(obj).__name__} in policy state")


def _decode(obj: Any) -> Any:  # JSON-like values
    if isinstance(obj, dict):
        if _TAG in obj:
            if obj[_TAG] == "object":
                arr = np.empty(len(obj["data"]), dtype=object)
                for i, v in enumerate(obj["data"]):
                    arr[i] = _decode(v)
                return arr.reshape(obj["shape"])
            raw = base64.b64decode(obj["data"])
            return np.frombuffer(raw, dtype=np.dtype(obj[_TAG])).reshape(obj["shape"]).copy()
        if _FLOAT in obj and len(obj) == 1:
            return float(obj[_FLOAT])
        return {k: _decode(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_decode(v) for v in obj]
    return obj


def dumps(state: Any) -> bytes:
    """Encode ``state`` (dicts, lists, scalars, numpy arrays) as UTF-8 JSON bytes."""
    return json.dumps(_encode(state), separators=(",", ":"), allow_nan=False).encode()


def loads(data: bytes | str) -> Any:
    """Decode bytes produced by :func:`dumps`."""
    return _decode(json.loads(data))
