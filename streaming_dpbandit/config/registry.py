"""Each policy's configuration, derived from the policy's class: nothing to write per policy.

:func:`config_class` turns a registered policy (:data:`~streaming_dpbandit.policies.REGISTRY`)
into a pydantic model: one field per constructor parameter, with the parameter's annotation as
its type (bounds are ``Annotated`` constraints, :mod:`streaming_dpbandit.policies.types`), its
default, and its description from the class's numpydoc ``Parameters``; the policy's class
attributes say what differs (``config_names``, ``config_aliases``, ``required_in_config``,
``config_types``, ``not_configurable``), and its methods the rules (``validate``,
``simulation_only``, ``secure_by_default``). ``CONFIGS`` maps every configurable policy's name
to its model, built on first use: a command that validates one policy imports that policy only
(start-up, issue 24).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import operator
import re
import sys
import types
import typing
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Literal

from ..errors import ConfigError

if TYPE_CHECKING:
    from ..policies.base import BasePolicy
    from .base import PolicyConfigBase

__all__ = ["CONFIGS", "config_class", "parameter_docs", "policy_config", "validate_for_mode"]

#: A parameter whose type is one of the package's objects takes its description in a
#: configuration: ``{qualified class name: (module, model)}``.
_DESCRIPTIONS = {
    "streaming_dpbandit.matroids.base.Matroid": (
        "streaming_dpbandit.config.matroid",
        "MatroidConfig",
    )
}


def parameter_docs(cls: type) -> dict[str, str]:
    """The numpydoc ``Parameters`` of ``cls`` and its bases: ``{name: first paragraph}``.

    >>> from streaming_dpbandit.policies import REGISTRY
    >>> parameter_docs(REGISTRY["fliphat"])["delta"]
    "Per-fit budget, which is also the whole run's (ε, δ)-JDP guarantee."
    """
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        doc = inspect.cleandoc(klass.__dict__.get("__doc__") or "")
        section = re.search(r"^Parameters\n-+\n(.*?)(?=^\S[^\n]*\n-+\n|\Z)", doc, re.M | re.S)
        if section is None:
            continue
        names: list[str] = []
        heading = False  # a line of names that ends in "," goes on on the next line
        for line in section.group(1).splitlines():
            if line and not line[0].isspace():
                more = [n.strip() for n in line.split(":")[0].split(",") if n.strip()]
                names = [*names, *more] if heading else more
                heading = line.rstrip().endswith(",")
                for n in names:
                    out[n] = ""
                continue
            heading = False
            if line.strip() and names:
                for n in names:
                    out[n] = (out[n] + " " + line.strip()).strip()
            elif names and any(out[n] for n in names):
                names = []  # the first paragraph only
    return out


def _evaluate(annotation: Any, module: str) -> Any:
    """A parameter's annotation as a type (it is a string in a postponed-annotations module)."""
    if not isinstance(annotation, str):
        return annotation
    namespace = {**vars(typing), **vars(sys.modules[module])}
    return eval(annotation, namespace)


def _description_type(annotation: Any) -> Any:
    """The configuration's type of a parameter typed as one of the package's objects."""
    for member in (annotation, *typing.get_args(annotation)):
        key = f"{getattr(member, '__module__', '')}.{getattr(member, '__qualname__', '')}"
        if key in _DESCRIPTIONS:
            module, name = _DESCRIPTIONS[key]
            return getattr(importlib.import_module(module), name)
    return annotation


def _without_none(annotation: Any) -> Any:
    members = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and members:
        return functools.reduce(operator.or_, members)
    return annotation


@functools.cache
def config_class(policy: type[BasePolicy]) -> type[PolicyConfigBase]:
    """The configuration model of ``policy``, derived from its constructor (cached).

    >>> from streaming_dpbandit.policies import REGISTRY
    >>> cfg = config_class(REGISTRY["greedy"])(d=3)
    >>> cfg.policy, cfg.d, cfg.reg, cfg.params()
    ('greedy', 3, 1.0, {'d': 3, 'reg': 1.0, 'batch_size': 1})
    """
    from pydantic import AliasChoices, Field, create_model

    from .base import PolicyConfigBase

    docs = parameter_docs(policy)
    fields: dict[str, Any] = {}
    for p in inspect.signature(policy.__init__).parameters.values():
        if p.name in ("self", "seed") or p.name in policy.not_configurable:
            continue
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        name = policy.config_names.get(p.name, p.name)
        annotation = policy.config_types.get(p.name)
        if annotation is None:
            annotation = _description_type(_evaluate(p.annotation, policy.__init__.__module__))
        required = p.default is p.empty
        if p.name in policy.required_in_config:  # stated, and not as null
            required, annotation = True, _without_none(annotation)
        aliases = policy.config_aliases.get(p.name)
        field = Field(
            ... if required else p.default,
            description=docs.get(p.name) or None,
            validation_alias=AliasChoices(name, *aliases) if aliases else None,
        )
        fields[name] = (annotation, field)
    tag: Any = Literal[policy.name]
    model: type[PolicyConfigBase] = create_model(
        f"{policy.__name__}Config",
        __base__=PolicyConfigBase,
        __doc__=f"The configuration of {policy.__name__} (derived from its constructor).",
        __module__=__name__,
        policy=(tag, policy.name),
        private=(bool, policy.private),
        **fields,
    )
    model.renamed = {field: param for param, field in policy.config_names.items()}
    model.not_configurable = policy.not_configurable
    model.before_added = dict(policy.config_before_added)
    return model


class _Configs(Mapping[str, "type[PolicyConfigBase]"]):
    """``policy name → configuration model`` for every configurable registered policy."""

    def __getitem__(self, name: str) -> type[PolicyConfigBase]:
        from ..policies import REGISTRY

        if name not in REGISTRY or not REGISTRY[name].configurable:
            raise KeyError(name)
        cls: type[BasePolicy] = REGISTRY[name]
        return config_class(cls)

    def __contains__(self, name: object) -> bool:
        from ..policies import REGISTRY

        return isinstance(name, str) and name in REGISTRY and REGISTRY[name].configurable

    def __iter__(self) -> Iterator[str]:
        from ..policies import REGISTRY

        return iter([name for name, cls in REGISTRY.items() if cls.configurable])

    def __len__(self) -> int:
        return sum(1 for _ in self)


#: Configuration model by policy name, for every registered policy with ``configurable``.
CONFIGS = _Configs()


def policy_config(name: str, params: dict) -> PolicyConfigBase:
    """Validate ``params`` for policy ``name``; raise :class:`ConfigError` with one line."""
    if name not in CONFIGS:
        raise ConfigError(f"unknown policy {name!r}; choose from {', '.join(sorted(CONFIGS))}")
    cls = CONFIGS[name]
    from pydantic import ValidationError  # loaded with the configuration class

    from .base import format_validation_error

    try:
        return cls(**params)
    except ValidationError as err:
        raise ConfigError(
            format_validation_error(err, f"invalid parameters for {name}: ")
        ) from None


def validate_for_mode(cfg: PolicyConfigBase, mode: str) -> None:
    """Refuse settings that are only acceptable in simulation (FLIPHAT spec §5.3, §6)."""
    reason = None if mode == "simulation" else cfg.simulation_only()
    if reason:
        raise ConfigError(reason)
