"""The HTTP surface: Azure Personalizer's v1.0 Rank / Reward / Activate (docs/gateway.md).

FastAPI on uvicorn. The request and response models below are Personalizer's shapes (camelCase
fields); FastAPI validates with them and generates the OpenAPI document (``/openapi.json``)
from them. Every refusal is a JSON error in Personalizer's format naming the field:
``{"error": {"code": "BadRequest", "message": ..., "target": "actions[3].id",
"innerError": {"code": "InvalidRequest"}}}`` — never a 500 for a client's mistake.

Routes: ``POST /personalizer/v1.0/rank`` (201), ``POST /personalizer/v1.0/events/{eventId}/
reward`` (204), ``POST /personalizer/v1.0/events/{eventId}/activate`` (204), ``GET /metrics``,
``GET /livez``, ``GET /readyz``.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import FastAPI, Path, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .. import __version__
from .core import Gateway, GatewayError

__all__ = [
    "ErrorResponse",
    "RankRequest",
    "RankResponse",
    "RankableAction",
    "RewardRequest",
    "build_app",
]

log = logging.getLogger("streaming_dpbandit.gateway")

PREFIX = "/personalizer/v1.0"
#: response header of a Rank: the version of the released model that decided (0: the initial)
MODEL_VERSION = "x-dpbandit-model-version"
EventId = Annotated[str, Path(min_length=1, max_length=200, description="the event's id")]


class _Model(BaseModel):
    # strict: "yes" is not a boolean, 123 not an id (a client's bug is named, not guessed at)
    model_config = ConfigDict(extra="forbid", strict=True)


class RankableAction(_Model):
    """An action to rank, with its feature objects."""

    id: str = Field(min_length=1, max_length=200, description="the action's id")
    features: list[dict[str, Any]] = Field(
        default_factory=list, description="feature objects (docs/features.md)"
    )


class RankRequest(_Model):
    """Personalizer's rank request."""

    contextFeatures: list[dict[str, Any]] = Field(
        default_factory=list, description="feature objects of the context (docs/features.md)"
    )
    actions: list[RankableAction] = Field(
        min_length=1, max_length=10_000, description="the candidates (gateway.max_actions: 50)"
    )
    excludedActions: list[str] = Field(
        default_factory=list, description="ids of actions that must not be chosen"
    )
    eventId: str | None = Field(
        None, min_length=1, max_length=200, description="the event's id (default: a new UUID)"
    )
    deferActivation: bool = Field(
        False, description="learn from the event only once it is activated"
    )


class RankedAction(BaseModel):
    id: str
    probability: float = Field(description="probability that the policy chose this action")


class RankResponse(BaseModel):
    """Personalizer's rank response: the chosen action first, then its ties, then by score."""

    ranking: list[RankedAction]
    eventId: str
    rewardActionId: str


class RewardRequest(_Model):
    value: float = Field(description="the reward (finite; inside the bandit's reward_bounds)")


class _InnerError(BaseModel):
    code: str


class _Error(BaseModel):
    code: str = Field(description="BadRequest, ResourceNotFound, Conflict or ServiceUnavailable")
    message: str
    target: str | None = Field(None, description="the field concerned, e.g. actions[3].id")
    innerError: _InnerError


class ErrorResponse(BaseModel):
    error: _Error


_OUTER = {400: "BadRequest", 404: "ResourceNotFound", 409: "Conflict", 503: "ServiceUnavailable"}


def _error(status: int, inner: str, message: str, target: str | None, retry: int = 0) -> Response:
    body = {
        "error": {
            "code": _OUTER.get(status, "BadRequest"),
            "message": message,
            "target": target,
            "innerError": {"code": inner},
        }
    }
    headers = {"Retry-After": str(retry)} if status == 503 else None
    return JSONResponse(body, status_code=status, headers=headers)


def _path(loc: tuple[Any, ...]) -> str:
    """A pydantic error location as a field path: ``("body", "actions", 3, "id")`` →
    ``actions[3].id``."""
    out = ""
    for part in loc[1:] if loc and loc[0] in ("body", "path") else loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "body"


def _errors(status: int, text: str) -> dict[int | str, dict[str, Any]]:
    return {status: {"model": ErrorResponse, "description": text}}


def _body(model: str) -> dict[str, Any]:
    """An OpenAPI request body of one of :data:`BODIES` (routes that parse their own body)."""
    ref = {"$ref": f"#/components/schemas/{model}"}
    return {"required": True, "content": {"application/json": {"schema": ref}}}


#: the request bodies parsed by the routes themselves, added to the OpenAPI components
BODIES = ("RankRequest",)


def _openapi(app: FastAPI) -> Callable[[], dict[str, Any]]:
    """The OpenAPI document, with :data:`BODIES` and the models they refer to as components."""
    from fastapi.openapi.utils import get_openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version,
                              description=app.description, routes=app.routes)  # fmt: skip
            schemas = doc.setdefault("components", {}).setdefault("schemas", {})
            for model in (RankRequest,):
                js = model.model_json_schema(ref_template="#/components/schemas/{model}")
                schemas.update(js.pop("$defs", {}))
                schemas[model.__name__] = js
            app.openapi_schema = doc
        return app.openapi_schema

    return openapi


def build_app(gw: Gateway, registry: Any) -> FastAPI:
    """The FastAPI application of an opened :class:`~.core.Gateway`."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    app = FastAPI(
        title="dpbandit gateway",
        version=__version__,
        description="Azure Personalizer v1.0 Rank / Reward / Activate over a differentially "
        "private bandit (docs/gateway.md).",
    )
    app.openapi = _openapi(app)  # type: ignore[method-assign]
    retry = gw.settings.gateway.retry_after_s
    metrics = gw.metrics

    def observe(route: str, t0: float, status: int) -> None:
        metrics.request_duration.labels(route, str(status)).observe(time.perf_counter() - t0)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        err = exc.errors()[0]
        route = request.url.path.rsplit("/", 1)[-1]
        metrics.refused.labels(route, "InvalidRequest").inc()
        loc = tuple(err.get("loc", ()))
        if err.get("type") == "json_invalid":
            return _error(400, "InvalidRequest", "the body is not valid JSON", "body")
        return _error(400, "InvalidRequest", str(err.get("msg", "invalid")), _path(loc))

    def invalid_body(route: str, t0: float, exc: ValidationError) -> Response:
        err = exc.errors(include_url=False)[0]
        metrics.refused.labels(route, "InvalidRequest").inc()
        observe(route, t0, 400)
        if err.get("type") == "json_invalid":
            return _error(400, "InvalidRequest", "the body is not valid JSON", "body")
        return _error(400, "InvalidRequest", str(err.get("msg", "invalid")), _path(err["loc"]))

    def refused(route: str, t0: float, err: GatewayError) -> Response:
        metrics.refused.labels(route, err.code).inc()
        observe(route, t0, err.status)
        return _error(err.status, err.code, err.message, err.target, retry)

    async def durable(seq: int, reward: bool) -> bool:
        if not gw.needs_sync(seq, reward):  # (no thread hop when the answer need not wait)
            return True
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, gw.wait_durable, seq, reward)

    not_durable = GatewayError(503, "NotDurable", "the record could not be synced to disk")

    @app.post(
        f"{PREFIX}/rank",
        status_code=201,
        response_class=Response,
        responses={
            201: {"model": RankResponse, "description": "the ranking"},
            **_errors(400, "a field is invalid (named in target)"),
            **_errors(409, "the eventId was ranked with another request"),
            **_errors(503, "too many records wait for the learner: retry after Retry-After"),
        },
        summary="Rank actions: choose one for the context",
        openapi_extra={"requestBody": _body("RankRequest")},
    )
    async def rank(request: Request) -> Response:
        t0 = time.perf_counter()
        raw = await request.body()
        try:  # one pass of pydantic's JSON parser and validation (the schema: openapi below)
            body = RankRequest.model_validate_json(raw)
        except ValidationError as exc:
            return invalid_body("rank", t0, exc)
        try:
            answer, seq, version = gw.rank(body, hashlib.blake2b(raw, digest_size=8).digest())
            if not await durable(seq, reward=False):
                raise not_durable
        except GatewayError as err:
            return refused("rank", t0, err)
        observe("rank", t0, 201)
        return Response(answer, status_code=201, media_type="application/json",
                        headers={MODEL_VERSION: str(version)})  # fmt: skip

    @app.post(
        f"{PREFIX}/events/{{eventId}}/reward",
        status_code=204,
        response_class=Response,
        responses={
            204: {"description": "the reward is recorded (durably)"},
            **_errors(400, "the value is invalid"),
            **_errors(404, "no such event"),
            **_errors(409, "already rewarded, not activated, or its feedback window passed"),
            **_errors(503, "too many records wait for the learner: retry after Retry-After"),
        },
        summary="Report the reward of an event",
    )
    async def reward(eventId: EventId, body: RewardRequest) -> Response:
        t0 = time.perf_counter()
        try:
            seq = gw.reward(eventId, body.value)
            if not await durable(seq, reward=True):
                raise not_durable
        except GatewayError as err:
            return refused("reward", t0, err)
        observe("reward", t0, 204)
        return Response(status_code=204)

    @app.post(
        f"{PREFIX}/events/{{eventId}}/activate",
        status_code=204,
        response_class=Response,
        responses={
            204: {"description": "the event is activated (idempotent)"},
            **_errors(404, "no such event"),
            **_errors(503, "too many records wait for the learner: retry after Retry-After"),
        },
        summary="Activate an event ranked with deferActivation",
    )
    async def activate(eventId: EventId) -> Response:
        t0 = time.perf_counter()
        try:
            seq = gw.activate(eventId)
            if not await durable(seq, reward=False):
                raise not_durable
        except GatewayError as err:
            return refused("activate", t0, err)
        observe("activate", t0, 204)
        return Response(status_code=204)

    @app.get("/metrics", include_in_schema=False)
    async def prometheus() -> Response:
        metrics.buffered.set(gw.outlet.backlog)
        metrics.events_remembered.set(len(gw.events))
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/livez", include_in_schema=False)
    @app.get("/readyz", include_in_schema=False)
    async def probes(request: Request) -> Response:
        answered = gw.probe(request.url.path)
        assert answered is not None  # (the two probe paths)
        status, body = answered
        return JSONResponse(body, status_code=status, headers={"Cache-Control": "no-store"})

    return app
