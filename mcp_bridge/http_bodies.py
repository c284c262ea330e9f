"""Reading and answering JSON-RPC request bodies at the HTTP edge, before the SDK sees them.

chartgen's Accept rule, the JSON-RPC error envelope, body reads bounded by a byte limit (with
the rest of a refused body drained so a proxy in front relays our answer), and replaying a
body that was already read to the SDK's session manager.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Message, Receive, Scope

MAX_BODY_BYTES = 16 * 1024 * 1024
"""Largest body read for an authenticated request."""


def accepts_json(accept: str | None) -> bool:
    """chartgen's Accept rule: missing → yes; else some */*, application/* or application/json without q=0."""
    if accept is None or not accept.strip():
        return True
    for part in accept.split(","):
        pieces = [p.strip() for p in part.split(";")]
        media = pieces[0].lower()
        if media not in ("*/*", "application/*", "application/json"):
            continue
        q_zero = False
        for param in pieces[1:]:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q_zero = float(value.strip()) == 0.0
                except ValueError:
                    q_zero = False
        if not q_zero:
            return True
    return False


def rpc_error(status: int, code: int, message: str, session_id: str | None, req_id: Any = None) -> Response:
    headers = {"mcp-session-id": session_id} if session_id else None
    body = {"jsonrpc": "2.0", "id": req_id, "error": {"code": code, "message": message}}
    return JSONResponse(body, status_code=status, headers=headers)


def with_header(scope: Scope, name: bytes, value: bytes) -> Scope:
    headers = [(k, v) for k, v in scope["headers"] if k != name]
    headers.append((name, value))
    return {**scope, "headers": headers}


def replay_body(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def read_body(receive: Receive, limit: int) -> tuple[bytes | None, bool]:
    """(body, True) when it fits in ``limit``; (None, ended) past it or on a disconnect, where
    ``ended`` says whether nothing of the request is left to receive."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None, True
        chunk = message.get("body", b"")
        more = message.get("more_body", False)
        size += len(chunk)
        if size > limit:
            return None, not more
        chunks.append(chunk)
        if not more:
            return b"".join(chunks), True


async def discard_body(receive: Receive, budget: int = MAX_BODY_BYTES) -> None:
    """Receive and drop what is left of a refused request's body (one chunk at a time, never kept).

    uvicorn closes a ``Connection: close`` request's socket as soon as the answer is sent; body
    bytes still unread then make the kernel send a reset, and a proxy (nginx talks to us with
    ``Connection: close``) turns our 401/413 into a 502.  Past ``budget`` bytes we stop and answer.
    """
    size = 0
    while size <= budget:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        size += len(message.get("body", b""))
        if not message.get("more_body", False):
            return


def declared_length(request: Request) -> int | None:
    value = request.headers.get("content-length")
    return int(value) if value is not None and value.isdigit() else None


def loads_or_none(body: bytes) -> Any:
    """The JSON value of ``body``, or None when it is not JSON (or nested too deeply)."""
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return None


def rpc_methods(message: Any) -> list[Any]:
    """The ``method`` of each JSON-RPC message of a body (one message or a batch)."""
    items = message if isinstance(message, list) else [message]
    return [m.get("method") if isinstance(m, dict) else None for m in items]


def rpc_request_id(message: Any) -> Any:
    """The ``id`` of a single JSON-RPC message (None for a batch or a non-object)."""
    return message.get("id") if isinstance(message, dict) else None
