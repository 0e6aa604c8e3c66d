"""Argument types and checks shared by the subcommands (one clear line per mistake)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Collection
from pathlib import Path

from ..errors import ConfigError

__all__ = [
    "EXIT_TARGET_FAILED",
    "PLOT_FORMATS",
    "build_env",
    "deep_merge",
    "delta",
    "epsilons",
    "json_default",
    "known_params",
    "level",
    "non_negative_float",
    "non_negative_int",
    "parse_kv",
    "plot_target",
    "policy_config",
    "policy_fields",
    "policy_names",
    "positive_float",
    "positive_int",
    "reject_unknown_params",
    "user_level_config",
    "writable",
]

#: Exit status of a reproduction whose targets were missed.
EXIT_TARGET_FAILED = 1


def _number(convert: Callable, ok: Callable, expected: str, out_of_range: str | None = None):
    """An argparse type: ``convert(text)`` accepted when ``ok``; the error says ``expected``."""

    def parse(text: str):
        try:
            v = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if not ok(v):
            raise argparse.ArgumentTypeError(
                f"{out_of_range or 'expected ' + expected}, got {text!r}"
            )
        return v

    return parse


_INF = float("inf")
positive_int = _number(int, lambda v: v >= 1, "a positive integer")
non_negative_int = _number(int, lambda v: v >= 0, "an integer >= 0")
positive_float = _number(float, lambda v: v > 0 and v != _INF, "a positive number")
non_negative_float = _number(float, lambda v: v >= 0 and v != _INF, "a number >= 0")
delta = _number(float, lambda v: 0 < v < 1, "a number in (0, 1)", "δ must be in (0, 1)")
level = _number(float, lambda v: 0 < v < 1, "a number in (0, 1)", "the level must be in (0, 1)")


def epsilons(text: str) -> list[float]:
    """``--epsilon``: comma-separated positive, finite numbers.

    >>> epsilons("0.5, 1,2")
    [0.5, 1.0, 2.0]
    """
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers, got {text!r}"
        ) from None
    if not vals or any(not (0 < v < _INF) for v in vals):
        raise argparse.ArgumentTypeError("every ε must be a positive, finite number")
    return vals


def writable(path: str | None, what: str) -> None:
    """An output file's directory exists and is writable (checked before anything runs)."""
    if path is None:
        return
    parent = Path(path).resolve().parent
    if not parent.is_dir():
        raise ConfigError(f"{what}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise ConfigError(f"{what}: directory {parent} is not writable")


#: Image formats of ``--plot`` (matplotlib's, by file suffix).
PLOT_FORMATS = (".png", ".svg", ".pdf", ".jpg", ".jpeg", ".eps", ".ps", ".tif", ".tiff", ".webp")


def plot_target(path: str | None) -> None:
    """``--plot``: a writable directory and an image format, checked before anything runs."""
    if path is None:
        return
    writable(path, "--plot")
    suffix = Path(path).suffix.lower()
    if suffix not in PLOT_FORMATS:
        raise ConfigError(
            f"--plot {path}: "
            + (f"unsupported image format {suffix!r}" if suffix else "no image format suffix")
            + f"; use one of {', '.join(PLOT_FORMATS)}"
        )


def build_env(name: str, params: dict):
    """The environment ``name`` built from ``--env-param`` values (one line per mistake)."""
    from ..envs import REGISTRY

    cls = REGISTRY.get(name)
    if cls is None:
        raise ConfigError(
            f"unknown environment {name!r}; choose from {', '.join(sorted(REGISTRY))}"
        )
    import inspect

    sig = inspect.signature(cls).parameters.values()
    accepted = [p.name for p in sig if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    unknown = sorted(set(params) - set(accepted))
    if unknown and not any(p.kind == p.VAR_KEYWORD for p in sig):
        raise ConfigError(
            f"unknown --env-param {', '.join(unknown)} for {name}; it takes "
            f"{', '.join(accepted) or 'none'}"
        )
    try:
        return cls(**params)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"invalid --env-param for {name}: {err}") from None


# -- policies ----------------------------------------------------------------------------------
def parse_kv(items: list[str] | None, what: str = "--policy-param") -> dict:
    """:func:`streaming_dpbandit.config.parse_kv`, imported on first use."""
    from ..config import parse_kv

    return parse_kv(items, what)


def policy_config(name: str, params: dict):
    """:func:`streaming_dpbandit.config.policy_config`, imported on first use."""
    from ..config import policy_config

    return policy_config(name, params)


def policy_names(items: list[str], refuse: Callable[[str], str | None] | None = None) -> list[str]:
    """The configurable policies named by repeated or comma-separated ``--policy`` values;
    ``refuse(name)``, when given, says why a command does not take a policy (None: it does)."""
    from ..config import CONFIGS

    names = [n.strip() for item in items for n in item.split(",") if n.strip()]
    if not names:
        raise ConfigError("--policy names no policy; choose from " + ", ".join(sorted(CONFIGS)))
    for name in names:
        if name not in CONFIGS:
            raise ConfigError(f"unknown policy {name!r}; choose from {', '.join(sorted(CONFIGS))}")
        reason = refuse(name) if refuse else None
        if reason:
            raise ConfigError(reason)
    return names


def policy_fields(name: str) -> set[str]:
    """The parameters of policy ``name`` a configuration sets."""
    from ..config import CONFIGS

    return set(CONFIGS[name].model_fields) - {"policy", "private"}


def known_params(name: str, params: dict) -> dict:
    """The subset of ``params`` that policy ``name`` accepts (others may belong to siblings)."""
    fields = policy_fields(name)
    return {k: v for k, v in params.items() if k in fields}


def reject_unknown_params(
    user: dict, names: list[str], also: Collection[str] = frozenset()
) -> None:
    """Refuse a ``--policy-param`` that no policy of ``names`` takes."""
    unknown = set(user) - set().union(*(policy_fields(n) for n in names)) - set(also)
    if unknown:
        raise ConfigError(
            f"--policy-param {', '.join(sorted(unknown))} is not a parameter of {', '.join(names)}"
        )


def user_level_config(args, policy_cfg=None):
    """The :class:`~streaming_dpbandit.config.UserLevelConfig` of ``--max-contributions-per-user``
    (and ``--max-releases-per-user``, ``--max-users``), or None (event level); with
    ``policy_cfg``, refused with one line when the policy has no group calibration."""
    k = getattr(args, "max_contributions_per_user", None)
    e = getattr(args, "max_releases_per_user", None)
    if k is None:
        if e is not None:
            raise ConfigError("--max-releases-per-user needs --max-contributions-per-user")
        return None
    from ..config import UserLevelConfig

    given = {"max_contributions_per_user": k, "max_releases_per_user": e}
    if getattr(args, "max_users", None) is not None:
        given["max_users"] = args.max_users
    if getattr(args, "user_window_rounds", None) is not None:  # local DP (ldp-glb) only
        given["window_rounds"] = args.user_window_rounds
    cfg = UserLevelConfig(**given)
    if policy_cfg is not None:
        why = cfg.refusal(policy_cfg)
        if why is not None:
            raise ConfigError(why.replace("user_level: ", "--max-contributions-per-user: "))
    return cfg


# -- output ------------------------------------------------------------------------------------
def json_default(obj):
    """``json.dumps`` ``default`` for numpy arrays and scalars."""
    import numpy as np

    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"cannot serialise {type(obj).__name__}")


def deep_merge(base: dict, over: dict) -> dict:
    """``over`` merged into ``base``, recursively for nested dicts.

    >>> deep_merge({"a": {"x": 1, "y": 2}, "b": 1}, {"a": {"y": 3}})
    {'a': {'x': 1, 'y': 3}, 'b': 1}
    """
    out = dict(base)
    for k, v in over.items():
        out[k] = (
            deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
        )
    return out
