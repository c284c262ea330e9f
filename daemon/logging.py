"""Logging set-up, done once: structlog, JSON when not a TTY, and stderr only under --mcp.

Standard-library loggers (uvicorn, the MCP SDK, aiohttp) are routed through the same
renderer so the output is one consistent stream.  APScheduler's routine lines — a job added,
"Running job", "executed successfully", "Scheduler started" — are demoted to debug
(:class:`RoutineAtDebug`): at one a second per periodic job they were two thirds of a day's log;
its warnings (a missed run time, a run skipped because the last is still running) stay, and
the daemon's own scheduler logs a failed job at warning (daemon/scheduler.py).  Secrets never reach a log line: the
settings hold them as SecretStr and tool calls log no argument values.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Literal, TextIO

import orjson
import structlog

# Structured tracebacks without the frames' local variables: those hold request parameters,
# signed queries and keys (structlog's default dict_tracebacks shows them).
_JSON_TRACEBACKS = structlog.processors.ExceptionRenderer(
    structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
)


def _orjson_text(obj: Any, **kw: Any) -> str:
    """JSON lines through orjson (the audit line of every tool call is on the hot path)."""
    return orjson.dumps(obj, default=kw.get("default"), option=orjson.OPT_NON_STR_KEYS).decode()


_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}

APSCHEDULER_LOGGERS = ("apscheduler.scheduler", "apscheduler.executors.default", "apscheduler.jobstores.default")
"""APScheduler 3's loggers (each record is filtered on the logger that made it)."""


class RoutineAtDebug(logging.Filter):
    """A logger's INFO records as DEBUG: kept only when the daemon logs at debug; warnings and errors untouched."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.INFO:
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger().isEnabledFor(logging.DEBUG)


_ROUTINE_AT_DEBUG = RoutineAtDebug()


def configure_logging(
    level: str = "info",
    fmt: Literal["auto", "json", "console"] = "auto",
    *,
    stream: TextIO | None = None,
) -> None:
    """Configure structlog and stdlib logging to write to ``stream`` (default stderr)."""
    out = stream or sys.stderr
    use_json = fmt == "json" or (fmt == "auto" and not out.isatty())
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer(serializer=_orjson_text)
        if use_json
        else structlog.dev.ConsoleRenderer(colors=out.isatty())
    )
    structlog.configure(
        # below the level, an event is dropped before any processor runs
        processors=[structlog.stdlib.filter_by_level, *shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            _JSON_TRACEBACKS if use_json else structlog.processors.format_exc_info,
            renderer,
        ],
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(_LEVELS.get(level, logging.INFO))
    # uvicorn's access log repeats what our tool_call lines say
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
    for name in APSCHEDULER_LOGGERS:
        aps = logging.getLogger(name)
        if _ROUTINE_AT_DEBUG not in aps.filters:
            aps.addFilter(_ROUTINE_AT_DEBUG)
