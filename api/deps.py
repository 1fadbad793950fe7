"""Dependency aliases every route uses: the app's state and the caller's token.

NOTE: async, so FastAPI calls them on the event loop instead of a thread-pool hop each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from fleetval.api.auth import admit, bearer, require
from fleetval.api.db import Scope, ServiceDB, Token
from fleetval.api.executor import Executor
from fleetval.api.limits import Limits
from fleetval.store.dataset import Store


async def _db(request: Request) -> ServiceDB:
    return request.app.state.db


async def _store(request: Request) -> Store:
    return request.app.state.store


async def _executor(request: Request) -> Executor:
    return request.app.state.executor


async def _limits(request: Request) -> Limits:
    return request.app.state.settings.limits


DbDep = Annotated[ServiceDB, Depends(_db)]
StoreDep = Annotated[Store, Depends(_store)]
ExecutorDep = Annotated[Executor, Depends(_executor)]
LimitsDep = Annotated[Limits, Depends(_limits)]

ReadToken = Annotated[Token, Depends(require(Scope.READ))]
SubmitToken = Annotated[Token, Depends(require(Scope.SUBMIT))]
AdminToken = Annotated[Token, Depends(require(Scope.ADMIN))]


@dataclass(frozen=True)
class Reader:
    """A hot read's whole context in one dependency: the caller's read token, the service
    database and the store (one node to resolve per request instead of four)."""

    token: Token
    db: ServiceDB
    store: Store


async def _reader(request: Request) -> Reader:
    state = request.app.state
    return Reader(admit(state.db, bearer(request), Scope.READ), state.db, state.store)


ReaderDep = Annotated[Reader, Depends(_reader)]
