"""Bandit policies, one per file: single-arm (:class:`~.base.Policy`) or slate
(:class:`~.slate_base.SlatePolicy`), both :class:`~.base.BasePolicy`.

The policy modules are imported on first use (``from streaming_dpbandit.policies import FLIPHAT``,
``REGISTRY["fliphat"]``): together they import SciPy's linear algebra, optimisation and sparse
modules, and ``OneHotArms`` River's bandit module, which one policy seldom needs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..utils.lazy import LazyRegistry, lazy_attribute
from .base import BasePolicy, DecisionBatch, Policy

if TYPE_CHECKING:  # the real classes for type checkers (imported lazily at run time)
    from .dp_linucb import DPLinUCB
    from .dpts_mat import DPTSMAT
    from .dpucb_mat import DPUCBMAT
    from .fliphat import FLIPHAT
    from .greedy import GreedyRidge
    from .lasso_bandit import LassoBandit
    from .ldp_glb import LDPGLB as LDPGLB
    from .ldp_gloc import LDPGLOC as LDPGLOC
    from .ldp_ucb import LDPUCB as LDPUCB
    from .linucb import LinUCB
    from .linucb_disjoint import LinUCBDisjoint
    from .matroid_base import MatroidPolicy, SlateBatch
    from .matroid_baselines import OMM, CTSGaussian
    from .multi_armed import OneHotArms
    from .private_lasso import PrivateLASSO
    from .private_lasso_paper import PrivateLASSOPaper
    from .random import RandomPolicy
    from .sa_lasso import SALassoBandit
    from .slate_base import SlatePolicy
    from .table import TablePolicy
    from .th_lasso import THLassoBandit

#: Module of each public class of the package.
_MODULES = {
    "CTSGaussian": "matroid_baselines",
    "DPLinUCB": "dp_linucb",
    "DPTSMAT": "dpts_mat",
    "DPUCBMAT": "dpucb_mat",
    "FLIPHAT": "fliphat",
    "GreedyRidge": "greedy",
    "LDPGLB": "ldp_glb",
    "LDPGLOC": "ldp_gloc",
    "LDPUCB": "ldp_ucb",
    "LassoBandit": "lasso_bandit",
    "LinUCB": "linucb",
    "LinUCBDisjoint": "linucb_disjoint",
    "MatroidPolicy": "matroid_base",
    "OMM": "matroid_baselines",
    "OneHotArms": "multi_armed",
    "PrivateLASSO": "private_lasso",
    "PrivateLASSOPaper": "private_lasso_paper",
    "RandomPolicy": "random",
    "SALassoBandit": "sa_lasso",
    "SlateBatch": "matroid_base",
    "SlatePolicy": "slate_base",
    "THLassoBandit": "th_lasso",
    "TablePolicy": "table",
}


def _entries(names: dict[str, str]) -> dict[str, tuple[str, str]]:
    return {key: (_MODULES[cls], cls) for key, cls in names.items()}


#: Every policy by registry name: the one registry that the CLI (``--policy``), the service,
#: ``simulate``, ``replay``, ``explain`` and the tests read. The configurable ones have a
#: configuration class of the same name in ``streaming_dpbandit.config.CONFIGS``.
REGISTRY: LazyRegistry[Any] = LazyRegistry(
    __name__,
    _entries(
        {
            "fliphat": "FLIPHAT",
            "random": "RandomPolicy",
            "lasso-bandit": "LassoBandit",
            "linucb": "LinUCB",
            "linucb-disjoint": "LinUCBDisjoint",
            "greedy": "GreedyRidge",
            "dp-linucb": "DPLinUCB",
            "private-lasso": "PrivateLASSO",
            "th-lasso": "THLassoBandit",
            "sa-lasso": "SALassoBandit",
            "ldp-glb": "LDPGLB",
            "ldp-ucb": "LDPUCB",
            "ldp-gloc": "LDPGLOC",
            "table": "TablePolicy",
            "dpucb-mat": "DPUCBMAT",
            "dpts-mat": "DPTSMAT",
            "omm": "OMM",
            "cts-gaussian": "CTSGaussian",
        }
    ),
)

#: Registered policies that a parameter turns into another class: (registry name, parameter,
#: value) → class. PrivateLASSO's ``calibration="paper"`` is the paper's literal algorithm.
_VARIANTS = {("private-lasso", "calibration", "paper"): "PrivateLASSOPaper"}


def policy_class(name: str, params: Mapping[str, object] | None = None) -> type:
    """The class that builds policy ``name`` with the constructor parameters ``params``:
    ``REGISTRY[name]``, or the variant one of the parameters selects.

    >>> policy_class("private-lasso", {"d": 4, "calibration": "paper"}).__name__
    'PrivateLASSOPaper'
    >>> policy_class("private-lasso", {"d": 4}).__name__, policy_class("linucb").__name__
    ('PrivateLASSO', 'LinUCB')
    """
    params = params or {}
    for (key, param, value), variant in _VARIANTS.items():
        if key == name and params.get(param) == value:
            cls: type = lazy_attribute(__name__, _MODULES, variant)
            return cls
    return REGISTRY[name]


def policy_variants(name: str) -> list[type]:
    """The classes that parameters of policy ``name`` select instead of ``REGISTRY[name]``.

    >>> [cls.__name__ for cls in policy_variants("private-lasso")], policy_variants("linucb")
    (['PrivateLASSOPaper'], [])
    """
    names = [variant for (key, _param, _value), variant in _VARIANTS.items() if key == name]
    return [lazy_attribute(__name__, _MODULES, variant) for variant in names]


#: Registry names of the slate policies (:class:`~.slate_base.SlatePolicy`: they decide with
#: ``decide_slates``, not ``decide``; no per-arm contexts, no dimension d). OMM and
#: CTS-Gaussian are non-private, simulation-only baselines. Known without importing them.
SLATE_POLICIES = frozenset({"dpucb-mat", "dpts-mat", "omm", "cts-gaussian"})


def __getattr__(name: str) -> Any:  # PEP 562: a class of _MODULES, imported on first use
    return lazy_attribute(__name__, _MODULES, name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_MODULES])


__all__ = [
    "DPTSMAT",
    "DPUCBMAT",
    "FLIPHAT",
    "OMM",
    "REGISTRY",
    "SLATE_POLICIES",
    "BasePolicy",
    "CTSGaussian",
    "DPLinUCB",
    "DecisionBatch",
    "GreedyRidge",
    "LassoBandit",
    "LinUCB",
    "LinUCBDisjoint",
    "MatroidPolicy",
    "OneHotArms",
    "Policy",
    "PrivateLASSO",
    "PrivateLASSOPaper",
    "RandomPolicy",
    "SALassoBandit",
    "SlateBatch",
    "SlatePolicy",
    "THLassoBandit",
    "TablePolicy",
    "policy_class",
    "policy_variants",
]
