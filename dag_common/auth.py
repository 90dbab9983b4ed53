"""The cluster token on the wire: a bearer token, compared in constant time."""

from __future__ import annotations

import hmac

HEADER = "Authorization"


def bearer(token: str) -> dict[str, str]:
    """Request headers carrying `token`."""
    return {HEADER: f"Bearer {token}"}


def token_matches(header_value: str | None, token: str) -> bool:
    """Whether an Authorization header carries `token`, without leaking timing."""
    if not header_value or not header_value.startswith("Bearer "):
        return False
    return hmac.compare_digest(header_value[7:].encode(), token.encode())
