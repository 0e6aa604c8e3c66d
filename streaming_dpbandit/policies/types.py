"""The types of policy parameters: a constructor's annotations say what its configuration accepts.

A policy's configuration (``streaming_dpbandit.config``) is derived from its constructor's
signature: each parameter's annotation is the field's type, and bounds are ``Annotated``
constraints (``annotated_types``, which pydantic reads), written with the names below.

>>> from typing import get_args
>>> get_args(OpenUnit)[1:]
(Gt(gt=0), Lt(lt=1))
"""

from __future__ import annotations

from typing import Annotated, Literal

from annotated_types import Ge, Gt, Le, Lt

__all__ = [
    "AtLeastOne",
    "Ge",
    "Gt",
    "Le",
    "Lt",
    "NoiseBackend",
    "NonNegative",
    "NonNegativeInt",
    "OpenUnit",
    "Positive",
    "PositiveInt",
    "UnitInterval",
]

#: An integer > 0 (a dimension, a count of arms).
PositiveInt = Annotated[int, Gt(0)]
#: An integer ≥ 1 (a batch size, an iteration count).
AtLeastOne = Annotated[int, Ge(1)]
#: An integer ≥ 0.
NonNegativeInt = Annotated[int, Ge(0)]
#: A number > 0 (ε, a step size, a bound).
Positive = Annotated[float, Gt(0)]
#: A number ≥ 0.
NonNegative = Annotated[float, Ge(0)]
#: A number in (0, 1) (δ, a confidence level).
OpenUnit = Annotated[float, Gt(0), Lt(1)]
#: A number in [0, 1].
UnitInterval = Annotated[float, Ge(0), Le(1)]
#: Where a private policy draws its noise (docs/privacy/secure-noise.md): ``"auto"`` (every
#: policy's default) is the secure backend wherever the policy has a secure construction
#: (``Policy.secure_by_default``), else the fast one (``noise_backend_in_force``).
NoiseBackend = Literal["auto", "fast", "secure"]
