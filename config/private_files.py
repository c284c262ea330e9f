"""The data dir's files kept private: the directory 0700, files 0600, whatever the umask.

:func:`secure_data_dir` creates the data dir 0700 or tightens one open to others — except a
directory that is not the data dir's alone (sticky bit like /tmp, another user's, the home
directory), which is only warned about; :func:`secure_private_file` creates a file 0600 or
tightens it; :func:`tighten_private` is the chmod-with-a-warning both use (and the daemon uses
for trades.log and the token marker).  Split from storage/sqlite.py, which calls it before
SQLite opens the database.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
PRIVATE_UMASK = 0o077  # what the chartgen command runs its state-keeping modes with (systemd: UMask=0077)


def tighten_private(path: Path, mode: int, what: str = "data file") -> None:
    """chmod ``path`` to ``mode`` when group or others have any access, with a warning."""
    try:
        current = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return
    if current & 0o077 == 0:
        return
    try:
        path.chmod(mode)
    except OSError as exc:
        log.warning("data_file_too_open", path=str(path), mode=oct(current), error=str(exc), fix=f"chmod {mode:o}")
        return
    log.warning("data_file_tightened", path=str(path), what=what, was=oct(current), now=oct(mode))


def _shared_dir_reason(directory: Path) -> str | None:
    """Why ``directory`` must not be chmodded even when it is open (a shared or someone else's directory)."""
    st = directory.stat()
    if st.st_mode & stat.S_ISVTX:
        return "it is a shared directory (sticky bit, like /tmp)"
    if st.st_uid != os.geteuid():
        return "it belongs to another user"
    with contextlib.suppress(RuntimeError, OSError):
        if directory.resolve() == Path.home().resolve():
            return "it is your home directory"
    return None


def secure_data_dir(directory: Path) -> None:
    """Create ``directory`` 0700 (parents with the usual mode), or tighten it if group/others can enter it.

    A shared directory (sticky bit), someone else's, or the home directory is left as it is,
    with a warning: the database files in it are 0600 all the same.
    """
    if not directory.exists():
        directory.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            directory.mkdir(mode=PRIVATE_DIR_MODE)
    current = stat.S_IMODE(directory.stat().st_mode)
    if current & 0o077 and (reason := _shared_dir_reason(directory)) is not None:
        log.warning(
            "data_dir_open_to_others",
            path=str(directory),
            mode=oct(current),
            left_alone_because=reason,
            fix="use a directory of its own as the data dir (default ~/.chartgen)",
        )
        return
    tighten_private(directory, PRIVATE_DIR_MODE, "data dir")


def secure_private_file(path: Path) -> None:
    """Create ``path`` empty with mode 0600 if missing (whatever the umask), else tighten it to 0600."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, PRIVATE_FILE_MODE)
    except FileExistsError:
        tighten_private(path, PRIVATE_FILE_MODE, "data file")
        return
    os.close(fd)
