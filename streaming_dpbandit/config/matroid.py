"""A matroid's description in a configuration (a slate policy's ``matroid`` parameter)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
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
