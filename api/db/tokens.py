"""API tokens: only their hashes are stored; a token's scope, owner, expiry and revocation."""

from __future__ import annotations

import hashlib
import secrets
import sqlite3
from dataclasses import dataclass
from enum import StrEnum

from fleetval.api.db.connection import Connection, now
from fleetval.api.db.schedules import Schedule
from fleetval.api.db.submissions import Submission

TOKEN_ID_CHARS = 12  # a token's public id: the start of its hash, for listing and revoking


class Scope(StrEnum):
    """What a token may do; each scope includes the ones before it."""

    READ = "read"  # list and read runs, results, baselines, compare, metrics
    SUBMIT = "submit"  # submit and cancel runs
    ADMIN = "admin"  # set and delete baselines


SCOPE_RANK = {Scope.READ: 0, Scope.SUBMIT: 1, Scope.ADMIN: 2}


class TokenState(StrEnum):
    VALID = "valid"
    UNKNOWN = "unknown"
    REVOKED = "revoked"
    EXPIRED = "expired"


@dataclass(frozen=True, kw_only=True)
class Token:
    id: str
    name: str  # the owner
    scope: Scope
    created_at: str = ""
    expires_at: str | None = None
    revoked_at: str | None = None

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> Token:
        return cls(
            id=row["hash"][:TOKEN_ID_CHARS],
            name=row["name"],
            scope=Scope(row["scope"]),
            created_at=row["created_at"],
            expires_at=row["expires_at"],
            revoked_at=row["revoked_at"],
        )

    def state(self, at: str) -> TokenState:
        if self.revoked_at is not None:
            return TokenState.REVOKED
        if self.expires_at is not None and self.expires_at <= at:
            return TokenState.EXPIRED
        return TokenState.VALID

    @property
    def admin(self) -> bool:
        return self.scope == Scope.ADMIN

    def owns(self, sub: Submission) -> bool:
        """A run belongs to the name of the token that submitted it; admin may act on any."""
        return self.admin or sub.submitter == self.name

    def owns_schedule(self, schedule: Schedule) -> bool:
        return self.admin or schedule.owner == self.name


def hash_token(token: str) -> str:
    # NOTE: tokens are 256-bit random, so a plain sha256 cannot be brute-forced; no salt needed.
    return hashlib.sha256(token.encode()).hexdigest()


class TokenTable(Connection):
    """The `tokens` table."""

    def create_token(
        self, scope: Scope, name: str | None, *, expires_in_s: float | None = None
    ) -> str:
        """A new random token; only its hash is stored, so it is shown once. Without a
        `name` the token is its own owner (`<scope>-<id>`): two unnamed tokens never share
        runs."""
        token = "fv_" + secrets.token_urlsafe(32)
        digest = hash_token(token)
        expires = now(expires_in_s) if expires_in_s is not None else None
        with self._lock:
            self._conn.execute(
                "INSERT INTO tokens (hash, name, scope, created_at, expires_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (digest, name or f"{scope.value}-{digest[:TOKEN_ID_CHARS]}", scope.value, now(),
                 expires),
            )  # fmt: skip
        return token

    def lookup_token(self, token: str) -> Token | None:
        """The token's record, revoked or expired ones included (the caller says which)."""
        rows = self._query("SELECT * FROM tokens WHERE hash = ?", (hash_token(token),))
        return Token.from_row(rows[0]) if rows else None

    def tokens(self) -> list[Token]:
        return [Token.from_row(r) for r in self._query("SELECT * FROM tokens ORDER BY created_at")]

    def revoke_token(self, token_id: str) -> Token | None:
        """Revoke the token with this public id (from now on it answers 401); None if unknown."""
        if len(token_id) != TOKEN_ID_CHARS or not all(c in "0123456789abcdef" for c in token_id):
            return None
        with self._lock:
            self._conn.execute(
                "UPDATE tokens SET revoked_at = COALESCE(revoked_at, ?) WHERE substr(hash, 1, ?) = ?",
                (now(), TOKEN_ID_CHARS, token_id),
            )
        rows = self._query(
            "SELECT * FROM tokens WHERE substr(hash, 1, ?) = ?", (TOKEN_ID_CHARS, token_id)
        )
        return Token.from_row(rows[0]) if rows else None

    def can_submit(self, owner: str) -> bool:
        """Whether `owner` holds a valid token that may submit (a schedule's runs are theirs)."""
        rows = self._query("SELECT * FROM tokens WHERE name = ?", (owner,))
        at = now()
        return any(
            t.state(at) == TokenState.VALID and SCOPE_RANK[t.scope] >= SCOPE_RANK[Scope.SUBMIT]
            for t in map(Token.from_row, rows)
        )
