"""Bearer tokens with scopes: no token, an unknown, revoked or expired one 401; a token
without the scope 403."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from fleetval.api.db import SCOPE_RANK, Scope, ServiceDB, Token, TokenState, now

_bearer = HTTPBearer(auto_error=False, description="`fleetval token create --scope ...`")
_CHALLENGE = {"WWW-Authenticate": "Bearer"}


def authenticate(db: ServiceDB, credentials: HTTPAuthorizationCredentials | None) -> Token:
    if credentials is None:
        raise HTTPException(401, "missing bearer token (Authorization: Bearer ...)", _CHALLENGE)
    token = db.lookup_token(credentials.credentials)
    if token is None:
        raise HTTPException(401, "unknown token", _CHALLENGE)
    state = token.state(now())
    if state == TokenState.REVOKED:
        raise HTTPException(401, f"token {token.id} was revoked at {token.revoked_at}", _CHALLENGE)
    if state == TokenState.EXPIRED:
        raise HTTPException(401, f"token {token.id} expired at {token.expires_at}", _CHALLENGE)
    return token


def require(scope: Scope) -> Callable[..., Token]:
    """A dependency admitting tokens with `scope` or a scope that includes it.

    NOTE: async: one primary-key read on the database's reading connection (WAL: it never
    waits for a writer), cheaper than the thread-pool hop a sync dependency costs."""

    async def dependency(request: Request, credentials: Credentials) -> Token:
        return admit(request.app.state.db, credentials, scope)

    return dependency


Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
# What `Credentials` declares in the OpenAPI, for routes that read the header themselves.
BEARER_DECLARED: dict[str, list[dict[str, list[str]]]] = {"security": [{"HTTPBearer": []}]}


def bearer(request: Request) -> HTTPAuthorizationCredentials | None:
    """The Authorization header's bearer credentials, as `Credentials` reads them, without a
    dependency to resolve per request."""
    return credentials_of(request.headers.get("authorization", ""))


def credentials_of(authorization: str) -> HTTPAuthorizationCredentials | None:
    """An Authorization header's bearer credentials; None when empty or another scheme."""
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() != "bearer" or not value:
        return None
    return HTTPAuthorizationCredentials(scheme=scheme, credentials=value)


def admit(db: ServiceDB, credentials: HTTPAuthorizationCredentials | None, scope: Scope) -> Token:
    """The caller's token if it is valid and has `scope` (or one that includes it)."""
    token = authenticate(db, credentials)
    if SCOPE_RANK[token.scope] < SCOPE_RANK[scope]:
        raise HTTPException(
            403, f"this needs a token with scope {scope.value}; this one has {token.scope.value}"
        )
    return token


def permits(db: ServiceDB, credentials: HTTPAuthorizationCredentials | None, scope: Scope) -> bool:
    """Whether `credentials` are a valid token with `scope`: for a public route that tells a
    token's holder more (no token, or a bad one, is never a 401 there)."""
    try:
        admit(db, credentials, scope)
    except HTTPException:
        return False
    return True
