"""Start-up of a render worker process (engine.charts.pool), kept free of heavy imports.

A spawned worker imports this module first, to run :func:`init_worker`, before any job
arrives; importing the chart code here would defeat the pandas block below.
"""

from __future__ import annotations


def init_worker() -> None:
    """Pool worker start-up: die with the daemon, and keep pandas out of the worker.

    TA-Lib imports pandas (about 40 MB per process) only to accept ``pandas.Series``
    arguments; a worker computes on numpy arrays only, so the import is blocked (TA-Lib
    then works on numpy alone, as it does without pandas installed).
    """
    import sys

    sys.modules.setdefault("pandas", None)  # type: ignore[arg-type]  # typeshed: modules only; None blocks the import
    _die_with_parent()


def _die_with_parent() -> None:
    """Pool worker start-up: on Linux, ask the kernel to SIGTERM this worker when the daemon dies.

    A daemon killed with SIGKILL runs no clean-up; without this its render workers would be
    orphaned (holding memory and the daemon's stdout).  Elsewhere this is a no-op.
    """
    import ctypes
    import signal
    import sys

    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        return
