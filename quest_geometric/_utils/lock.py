"""A lock on a folder, so two runs never write the same files at once: a file created
atomically (``O_CREAT | O_EXCL``) holding the owner's process id and host name. A lock left
by a process of this host that no longer exists (a killed run) is stale and taken over; any
other lock refuses the second run with :class:`FolderInUseError`.
"""
from __future__ import annotations

import contextlib
import os
import socket


class FolderInUseError(RuntimeError):
    """Another run holds the lock on the folder.

    Attributes:
        holder (str): who (``"process 123 on host 'h'"``, or ``"an unreadable lock"``).
        lock_path (str): the lock file.
    """

    def __init__(self, message: str, holder: str = "", lock_path: str = "") -> None:
        super().__init__(message)
        self.holder = holder
        self.lock_path = lock_path


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    except OSError:  # pragma: no cover - e.g. an out-of-range pid
        return False
    return True


class FolderLock:
    """An exclusive lock on ``folder``: the file ``folder/name``, removed on release (on
    leaving the ``with`` block, exceptions included).

    Args:
        folder (str or os.PathLike): the folder (created if missing).
        name (str): the lock file's name inside ``folder``.
        owner (str): who takes it, for the messages (for example ``'Trainer'``).
    """

    def __init__(self, folder: str | os.PathLike, name: str, owner: str) -> None:
        self.folder = os.fspath(folder)
        self.path = os.path.join(self.folder, name)
        self.owner = owner
        self._token: str | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._token is not None

    def _read(self) -> tuple[int, str] | None:
        """The ``(pid, host)`` in the lock file, ``(-1, "")`` if it is gone, :obj:`None` if it
        cannot be parsed."""
        try:
            with open(self.path, encoding="utf-8") as f:
                text = f.read(256)
        except FileNotFoundError:
            return (-1, "")  # gone meanwhile: retry
        except OSError:
            return None
        parts = text.split()
        if len(parts) != 2 or not parts[0].isdigit():
            return None
        return int(parts[0]), parts[1]

    def acquire(self) -> None:
        """Take the lock, or raise :class:`FolderInUseError` naming the lock file."""
        if self.held:
            return
        os.makedirs(self.folder, exist_ok=True)
        token = f"{os.getpid()} {socket.gethostname()}\n"
        for _ in range(3):
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                found = self._read()
                if found == (-1, ""):
                    continue
                if (found is not None and found[1] == socket.gethostname()
                        and not _pid_alive(found[0])):
                    with contextlib.suppress(FileNotFoundError):  # stale: its process is gone
                        os.unlink(self.path)
                    continue
                holder = ("an unreadable lock" if found is None
                          else f"process {found[0]} on host {found[1]!r}")
                raise FolderInUseError(
                    f"{self.owner}: the folder {self.folder!r} is in use by another run "
                    f"({holder} holds {self.path!r}); use another folder, or wait for that run "
                    f"to end. If no run uses it, delete {self.path!r}",
                    holder=holder, lock_path=self.path,
                ) from None
            try:
                os.write(fd, token.encode())
            finally:
                os.close(fd)
            self._token = token
            return
        raise FolderInUseError(  # pragma: no cover - the lock kept changing hands
            f"{self.owner}: could not take the lock {self.path!r}: other runs keep taking it")

    def release(self) -> None:
        """Remove the lock file if this object holds it (and it still holds this process)."""
        if self._token is None:
            return
        token, self._token = self._token, None
        with contextlib.suppress(FileNotFoundError):
            with open(self.path, encoding="utf-8") as f:
                if f.read(256) != token:
                    return
            os.unlink(self.path)

    def __enter__(self) -> FolderLock:  # noqa: PYI034
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"FolderLock({self.path!r}, held={self.held})"
