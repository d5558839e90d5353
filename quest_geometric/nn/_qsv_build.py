r"""Building and loading the native QSV kernels from a cache that is trusted or not used
(private).

The C source (``csrc/qsv_kernels.c``) is compiled at first use by the system C compiler
(``$CC`` as a command line, else ``cc``, ``gcc`` or ``clang``) into a per-user cache folder:
``$QUEST_GEOMETRIC_CACHE``, else ``$XDG_CACHE_HOME/quest_geometric``, else
``~/.cache/quest_geometric`` (each must be an absolute path).  Loading a shared library runs
its code, so a cached library is loaded only when

- its folder is a real folder (no symbolic link) owned by the user and writable by nobody
  else (no group or other write bit), created ``0700``;
- the library is a regular file (opened with ``O_NOFOLLOW``) owned by the user, writable by
  nobody else;
- its content's SHA-256, checked before the file is mapped, equals the one recorded beside
  it (``<name>.sha256``) when it was built.

A library that fails these checks is rebuilt (in a private temporary folder where the cache
folder is not trusted) and one :class:`RuntimeWarning` says why.  A build is written under a
temporary name, flushed to disk, its hash recorded the same way, then renamed into place.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shlex
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path
from typing import Optional

__all__ = ["SOURCE", "BuildError", "Refused", "cache_dir", "compiler_command", "load_library"]

#: The kernels' C source, compiled at first use.
SOURCE = Path(__file__).with_name("csrc") / "qsv_kernels.c"
FLAGS = ("-O3", "-march=native", "-fopenmp-simd", "-shared", "-fPIC", "-pthread")
#: Tried first: the kernels' threads from the OpenMP pool that torch has loaded (its
#: ``libgomp.so.1``, which the library's own reference to that name resolves to), so they
#: share torch's threads; where the compiler has no OpenMP, POSIX threads (:data:`FLAGS`).
OPENMP_FLAGS = ("-fopenmp",)


class BuildError(RuntimeError):
    """The kernels cannot be had; the message says why."""


class Refused(BuildError):
    """A setting of the user's (``$CC``, the cache path) is refused; the message says why."""


def cache_dir() -> Path:
    """The cache folder the environment names; a relative one is refused (it would put
    native code wherever the process happens to run)."""
    for name, suffix in (("QUEST_GEOMETRIC_CACHE", ""), ("XDG_CACHE_HOME", "quest_geometric")):
        value = os.environ.get(name)
        if value:
            if not os.path.isabs(value):
                raise Refused(f"${name}={value!r} is a relative path; the kernel cache "
                                 "needs an absolute one")
            return Path(value) / suffix if suffix else Path(value)
    return Path.home() / ".cache" / "quest_geometric"


def compiler_command() -> Optional[list[str]]:
    """The compiler's command line: ``$CC`` split as a shell would (``CC='gcc -O0'``), else
    the first of ``cc``, ``gcc`` and ``clang`` found; :obj:`None` when there is none.  A
    ``$CC`` that is not a command line or names no program is refused."""
    cc = os.environ.get("CC", "").strip()
    if cc:
        try:
            argv = shlex.split(cc)
        except ValueError as err:
            raise Refused(f"$CC={cc!r} is not a command line ({err})") from None
        program = shutil.which(argv[0])
        if program is None:
            raise Refused(f"$CC={cc!r} names no program found on PATH ({argv[0]!r})")
        return [program, *argv[1:]]
    for name in ("cc", "gcc", "clang"):
        if shutil.which(name):
            return [str(shutil.which(name))]
    return None


def _machine_key() -> str:
    """What ``-march=native`` depends on: the CPU's model and feature flags."""
    key = platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(("model name", "flags", "Features")):
                    key += line
                if line.strip() == "":
                    break
    except OSError:
        pass
    return key


def _name(command: list[str], flags: tuple[str, ...], source: bytes) -> str:
    """``qsv_kernels-<digest>.so``: one name per source, compiler command, its version,
    flags and CPU."""
    version = subprocess.run([*command, "--version"], capture_output=True, text=True,
                             timeout=60).stdout
    digest = hashlib.sha256(b"\0".join(
        [source, "\0".join(command).encode(), " ".join(flags).encode(), version.encode(),
         _machine_key().encode()])).hexdigest()[:16]
    return f"qsv_kernels-{digest}.so"


def _untrusted(st: os.stat_result, what: str) -> Optional[str]:
    """Why a file or folder with this ``lstat`` may not be trusted, or :obj:`None`."""
    if st.st_uid != os.getuid():
        return f"{what} is owned by uid {st.st_uid}, not by this user (uid {os.getuid()})"
    if st.st_mode & 0o022:
        return f"{what} is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def _folder_problem(folder: Path) -> Optional[str]:
    """Creates ``folder`` (``0700``) where missing; why it may not hold trusted libraries,
    or :obj:`None`."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.lstat(folder)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        return f"the cache folder {folder} is a symbolic link or not a folder"
    return _untrusted(st, f"the cache folder {folder}")


def _open_checked(path: Path, recorded: Optional[str]) -> tuple[Optional[int], Optional[str]]:
    """``(fd, None)`` for a regular file owned by this user, writable by nobody else, whose
    SHA-256 is ``recorded`` (where given); else ``(None, why)``, or ``(None, None)`` where
    there is no such file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None, None
    except OSError as err:  # ELOOP: a symbolic link
        return None, f"{path} cannot be opened as a plain file ({err.strerror})"
    st = os.fstat(fd)
    why = (f"{path} is not a regular file" if not stat.S_ISREG(st.st_mode)
           else _untrusted(st, str(path)))
    if why is None and recorded is not None:
        digest = hashlib.sha256()
        while chunk := os.read(fd, 1 << 20):
            digest.update(chunk)
        if digest.hexdigest() != recorded:
            why = f"{path} does not match the hash recorded when it was built"
    if why is not None:
        os.close(fd)
        return None, why
    return fd, None


def _dlopen(fd: int, path: Path) -> ctypes.CDLL:
    """Loads ``path``, checked through the open file ``fd`` (closed here).  By its path, not
    ``/proc/self/fd``: the loader knows a library by its name, and a reused descriptor number
    would hand back another library.  Nobody else can replace the file between the check and
    the load: its folder is writable by this user alone."""
    os.close(fd)
    return ctypes.CDLL(str(path))


def _write_synced(folder: Path, data: bytes, target: Path) -> None:
    """Writes ``data`` to ``target`` through a temporary name, flushed to disk."""
    fd, tmp = tempfile.mkstemp(prefix=".qsv_kernels-", dir=folder)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    _sync_folder(folder)


def _sync_folder(folder: Path) -> None:
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _build(command: list[str], flags: tuple[str, ...], folder: Path, name: str
           ) -> tuple[ctypes.CDLL, Path]:
    """Compiles into ``folder / name`` (written, flushed, its hash recorded beside it,
    renamed into place) and loads the file built."""
    target = folder / name
    fd, tmp = tempfile.mkstemp(prefix=".qsv_kernels-", suffix=".so", dir=folder)
    os.close(fd)
    try:
        done = subprocess.run([*command, *flags, "-o", tmp, str(SOURCE), "-lm"],
                              capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise BuildError(f"{' '.join(command)} {' '.join(flags)} failed: "
                             f"{done.stderr.strip()[-2000:]}")
        with open(tmp, "rb+") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
            os.fsync(f.fileno())
        # The record first: a library in place always has its record (a stop between the
        # two leaves a record without its library, which is then rebuilt).
        _write_synced(folder, (digest + "\n").encode(), target.with_name(name + ".sha256"))
        os.replace(tmp, target)
        _sync_folder(folder)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    fd, why = _open_checked(target, digest)
    if fd is None:
        raise BuildError(why or f"{target} vanished after it was built")
    return _dlopen(fd, target), target


def _load_cached(folder: Path, name: str) -> tuple[Optional[ctypes.CDLL], Optional[str]]:
    """The cached library, checked against the hash recorded beside it; ``(None, why)``
    where there is one that fails a check, ``(None, None)`` where there is none."""
    path = folder / name
    if not os.path.lexists(path):
        return None, None
    fd, why = _open_checked(path.with_name(name + ".sha256"), None)
    if fd is None:
        return None, why or f"{path} has no recorded hash"
    with os.fdopen(fd, "r", encoding="ascii", errors="replace") as f:
        recorded = f.read(100).strip()
    fd, why = _open_checked(path, recorded)
    return (None, why) if fd is None else (_dlopen(fd, path), None)


def load_library(flag_sets: tuple[tuple[str, ...], ...]
                 ) -> tuple[ctypes.CDLL, Path, Optional[str]]:
    """``(library, path, warning)``: the kernels built with the first of ``flag_sets``
    that compiles, from the trusted cache or built anew; ``warning`` says why a cached
    library or the cache folder was not used (:obj:`None` where all was well).  Raises
    :class:`BuildError` where they cannot be had."""
    command = compiler_command()
    if command is None:
        raise BuildError("no C compiler found ($CC, cc, gcc or clang)")
    folder = cache_dir()
    problem = _folder_problem(folder)
    source = SOURCE.read_bytes()
    failures = []
    for flags in flag_sets:
        name = _name(command, flags, source)
        try:
            if problem is not None:
                lib, path = _build_private(command, flags, name)
                return lib, path, (f"{problem}; the kernels were built in a private "
                                   "temporary folder instead")
            lib, why = _load_cached(folder, name)
            if lib is not None:
                return lib, folder / name, None
            lib, path = _build(command, flags, folder, name)
            return lib, path, (None if why is None else f"{why}; rebuilt it")
        except BuildError as err:
            failures.append(str(err))
    raise BuildError(" / ".join(failures))


def _build_private(command: list[str], flags: tuple[str, ...], name: str
                   ) -> tuple[ctypes.CDLL, Path]:
    """Builds into a new private (``0700``) temporary folder, loads, removes the folder."""
    folder = Path(tempfile.mkdtemp(prefix="quest_geometric-"))
    try:
        return _build(command, flags, folder, name)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
