"""The error a tool raises to answer with an isError result (the message is shown to the user)."""

from __future__ import annotations

from typing import Any


class ToolError(Exception):
    """A tool-level failure: becomes ``{"content":[{"type":"text","text":msg}],"isError":true}``.

    The message names the field and the fix, and never contains a secret.  ``code`` and
    ``data`` (e.g. -32004 insufficient balance, -32001 rate limited with retry_after_secs)
    go into the result's ``structuredContent`` as ``{"error": {"code", "message", "data"}}``.
    """

    def __init__(self, message: str, *, code: int | None = None, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.data = data or {}

    def structured(self) -> dict[str, Any] | None:
        if self.code is None:
            return None
        return {"error": {"code": self.code, "message": str(self), "data": self.data}}
