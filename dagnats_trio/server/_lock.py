"""One process per store directory: an exclusive ``flock`` on a lock file inside it.

nats-server does not lock its JetStream store. Two servers on one store both start, and each
overwrites what the other appends (a second ``dagnats dev`` on the same data directory lost the
first one's history messages). So every embedded server takes this lock before it spawns and
keeps it until :meth:`NatsServer.stop`; a second taker fails at once, naming the holder.

``flock`` (not ``fcntl`` record locks) because it belongs to the open file, not the process: the
nats-server child inherits the descriptor, so the lock stays taken until the holder *and* its
server are gone (a parent killed with SIGKILL does not free the store while its server still
runs), and the kernel drops it when both have exited, however they died.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Final, final

from ._binary import NatsServerError

#: The lock file's name inside the store directory (nats-server keeps its data under ``jetstream``
#: there and ignores other files).
LOCK_FILE_NAME: Final = "dagnats.lock"
#: Enough of the lock file to hold a pid.
_PID_READ_BYTES: Final = 32


@final
class StoreLocked(NatsServerError):
    """Another process holds the store directory's lock."""

    def __init__(self, directory: Path, holder_pid: int | None) -> None:
        self.directory = directory
        self.holder_pid = holder_pid
        holder = f"pid {holder_pid}" if holder_pid is not None else "pid unknown"
        super().__init__(
            f"the store directory {directory} is in use by another process ({holder}); "
            "two servers on one store would lose writes"
        )


@final
class StoreLock:
    """A held lock; :meth:`release` (or the process's exit) frees it."""

    def __init__(self, directory: Path, fd: int) -> None:
        self.directory = directory
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, directory: Path) -> StoreLock:
        """Take the lock of ``directory`` (created if missing) without waiting, or raise
        :class:`StoreLocked`."""
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / LOCK_FILE_NAME
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            raise StoreLocked(directory, holder) from None
        except BaseException:
            os.close(fd)
            raise
        # For the error message of the next taker; the lock, not this text, is what excludes.
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(directory, fd)

    @property
    def fileno(self) -> int:
        """The descriptor to hand to the server child (``pass_fds``) so it holds the lock too."""
        if self._fd is None:
            raise NatsServerError("the store lock was released")
        return self._fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Close this process's descriptor; the lock is free once no child holds it either.
        The file stays: removing it would let two takers lock two different files."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, _PID_READ_BYTES, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isascii() and text.isdigit() else None
