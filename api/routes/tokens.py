"""API tokens for admins: list, create, revoke (the same as `fleetval token ...`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from fleetval.api.db import Scope, Token
from fleetval.api.deps import AdminToken, DbDep
from fleetval.api.errors import NotFound
from fleetval.api.models import NewToken, TokenOut, TokenRequest

router = APIRouter(prefix="/v1/tokens", tags=["tokens"])
TokenId = Annotated[str, Path(pattern=r"^[0-9a-f]{12}$", description="A token's public id")]


def _out(t: Token) -> TokenOut:
    return TokenOut(
        id=t.id,
        name=t.name,
        scope=t.scope.value,
        created_at=t.created_at,
        expires_at=t.expires_at,
        revoked_at=t.revoked_at,
    )


@router.get("", operation_id="list_tokens")
def list_tokens(_: AdminToken, db: DbDep) -> list[TokenOut]:
    """Every token by id, owner, scope, expiry and revocation (never the token itself)."""
    return [_out(t) for t in db.tokens()]


@router.post("", status_code=201, operation_id="create_token")
def create_token(body: TokenRequest, _: AdminToken, db: DbDep) -> NewToken:
    """A new token, shown once in `token`; only its hash is stored."""
    raw = db.create_token(Scope(body.scope), body.name, expires_in_s=body.expires_in_s)
    made = db.lookup_token(raw)
    if made is None:  # NOTE: just committed; only a concurrent wipe of the database gets here
        raise NotFound("the new token vanished from the database")
    return NewToken(**_out(made).model_dump(), token=raw)


@router.delete("/{token_id}", operation_id="revoke_token")
def revoke_token(token_id: TokenId, _: AdminToken, db: DbDep) -> TokenOut:
    """Revoke: from now on the token answers 401."""
    token = db.revoke_token(token_id)
    if token is None:
        raise NotFound(f"no token {token_id!r}", loc=["path", "token_id"])
    return _out(token)
