"""Configurations of the slate policies: the matroid, then DPUCB-MAT and DPTS-MAT."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from .base import PolicyConfigBase

__all__ = [
    "DPMatroidConfig",
    "DPTSMatConfig",
    "DPUCBMatConfig",
    "GraphicMatroidConfig",
    "LinearMatroidConfig",
    "MatroidConfig",
    "PartitionMatroidConfig",
    "UniformMatroidConfig",
]


class _Matroid(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True, allow_inf_nan=False)
    expected_rank: int | None = Field(None, ge=1, description="assertion on the computed rank")


class UniformMatroidConfig(_Matroid):
    """Any K of L items."""

    type: Literal["uniform"] = "uniform"
    n_items: int = Field(ge=1)
    k: int = Field(ge=1)


class PartitionMatroidConfig(_Matroid):
    """At most ``capacities[j]`` items of category j; ``categories[e]`` is item e's category."""

    type: Literal["partition"] = "partition"
    categories: list[int] = Field(min_length=1)
    capacities: list[int] = Field(min_length=1)


class GraphicMatroidConfig(_Matroid):
    """Items are the edges (u, v) of a multigraph; a slate is a spanning forest."""

    type: Literal["graphic"] = "graphic"
    edges: list[tuple[int, int]] = Field(min_length=1)
    n_vertices: int | None = Field(None, ge=1)


class LinearMatroidConfig(_Matroid):
    """Items are vectors; a slate is a basis of their span over the reals."""

    type: Literal["linear"] = "linear"
    vectors: list[list[float]] = Field(min_length=1)
    exact: bool = False
    tol: float = Field(1e-9, gt=0, lt=1)


MatroidConfig = Annotated[
    UniformMatroidConfig | PartitionMatroidConfig | GraphicMatroidConfig | LinearMatroidConfig,
    Field(discriminator="type"),
]


class DPMatroidConfig(PolicyConfigBase):
    """DPUCB-MAT / DPTS-MAT: private slates over a matroid (DP-matroid spec §10).

    ``items`` names the L items (the bandit's catalogue; default ``item-0`` … ``item-{L−1}``).
    ``calibration="paper"`` (ε0 = ε/K, certified as 2ε-DP only) is refused outside
    ``mode: simulation``. ``exploration``: ``posterior`` (default; the pooled estimate of every
    released batch and its variance) or ``thesis`` (the thesis's index on the last batch);
    post-processing either way.
    """

    private: bool = True
    matroid: MatroidConfig
    epsilon: float = Field(gt=0)
    calibration: Literal["certified", "paper"] = "certified"
    exploration: Literal["posterior", "thesis"] = "posterior"
    update_every: int = Field(1, ge=1)
    reward_range: tuple[float, float] = (0.0, 1.0)
    default_reward: float = Field(0.0, ge=0, le=1)
    items: list[str] | None = None
    bandit_id: str = "default"
    noise_backend: Literal["fast", "secure"] = "fast"

    renamed: ClassVar[dict[str, str]] = {"items": "item_ids"}

    def item_ids(self) -> list[str]:
        if self.items is not None:
            return list(self.items)
        from ..matroids import from_description

        return [f"item-{i}" for i in range(from_description(self.matroid.model_dump()).n_items)]

    def params(self) -> dict:
        return {**super().params(), "item_ids": self.item_ids()}


class DPUCBMatConfig(DPMatroidConfig):
    """DPUCB-MAT (thesis Alg. 2)."""

    policy: Literal["dpucb-mat"] = "dpucb-mat"


class DPTSMatConfig(DPMatroidConfig):
    """DPTS-MAT (thesis Alg. 5)."""

    policy: Literal["dpts-mat"] = "dpts-mat"
