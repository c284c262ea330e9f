"""The error a tool raises to answer with an isError result (the message is shown to the user)."""


class ToolError(Exception):
    """A tool-level failure: becomes ``{"content":[{"type":"text","text":msg}],"isError":true}``.

    The message names the field and the fix, and never contains a secret.
    """
