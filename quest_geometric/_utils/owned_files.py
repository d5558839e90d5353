"""The files a program wrote in a folder, recorded before they exist, and removal of only those.

A *manifest* is a JSON-lines file in the folder: a header line, then one entry per line,
each appended and fsynced **before** the program creates what it names, so the record
survives a ``kill -9``, an out-of-memory kill or a full disk (a torn last line named nothing
yet created and is ignored). Entries:

- ``{"file": "a/b.csv"}``: a regular file the program writes;
- ``{"folder": "a"}``: a folder the program creates;
- ``{"folder": "a", "open": true}``: a folder created empty whose whole content is the
  program's (written by code that cannot list each file first, e.g. a benchmark run) until
  ``{"sealed": "a"}`` follows; then only the files and folders listed by then are.

:func:`remove_owned` deletes only what is listed; :func:`unknown_entries` (what the
manifest does not cover) and :func:`unsafe_entries` (what removal would refuse) let a caller
refuse before it deletes anything.
"""
from __future__ import annotations

import errno
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Iterable

FORMAT = 2


class ManifestError(ValueError):
    """The manifest is not one this module writes (unreadable, not JSON lines, an entry that
    is not a plain relative path inside the folder)."""


class UnsafeEntryError(OSError):
    """An entry to remove is a symbolic link or not a regular file or folder."""


@dataclass
class Manifest:
    """What a manifest lists: relative ``/``-separated paths."""

    files: set[str] = field(default_factory=set)
    folders: set[str] = field(default_factory=set)
    #: folders whose whole content is the program's (created empty, not sealed yet)
    open: set[str] = field(default_factory=set)

    def covers(self, rel: str) -> bool:
        """Whether ``rel`` is listed, or lies inside an open folder."""
        return rel in self.files or rel in self.folders or any(
            p.as_posix() in self.open for p in PurePosixPath(rel).parents)


def safe_relative(entry: object) -> bool:
    """Whether ``entry`` is a plain relative path inside the folder (a manifest may be
    crafted: ``..``, absolute paths and the like are refused)."""
    if not isinstance(entry, str) or not entry or "\\" in entry or "\0" in entry:
        return False
    return not entry.startswith("/") and all(
        part not in ("", ".", "..") for part in entry.split("/"))


def _entry(line: dict, manifest: Manifest) -> bool:
    """Apply one parsed entry to ``manifest``; whether it was well-formed."""
    if set(line) == {"file"} and safe_relative(line["file"]):
        manifest.files.add(line["file"])
    elif set(line) <= {"folder", "open"} and safe_relative(line.get("folder")):
        manifest.folders.add(line["folder"])
        if line.get("open") is True:
            manifest.open.add(line["folder"])
        elif "open" in line:
            return False
    elif set(line) == {"sealed"} and safe_relative(line["sealed"]):
        manifest.open.discard(line["sealed"])
    else:
        return False
    return True


def read_manifest(path: str | os.PathLike) -> Manifest | None:
    """The manifest at ``path``, or :obj:`None` when there is none.

    Raises:
        ManifestError: not a regular file (a link is not followed), not readable, or not a
            manifest of this format.
    """
    path = os.fspath(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ManifestError(f"cannot be opened ({e.strerror}; a symbolic link is not "
                            "followed)") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise ManifestError("is not a regular file")
        raw = f.read()
    lines = raw.split(b"\n")
    if not raw.endswith(b"\n"):
        lines = lines[:-1]  # torn by a kill or a full disk: it named nothing yet created
    manifest = Manifest()
    for i, line in enumerate(lines):
        if not line and i == len(lines) - 1:
            continue
        try:
            data = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise ManifestError(f"line {i + 1} is not JSON") from None
        if i == 0:
            if data != {"format": FORMAT}:
                raise ManifestError(f"has no header {{\"format\": {FORMAT}}}")
        elif not isinstance(data, dict) or not _entry(data, manifest):
            raise ManifestError(f"line {i + 1} is not an entry naming a relative path inside "
                                "the folder")
    return manifest


def append_entries(path: str | os.PathLike, entries: Iterable[dict]) -> None:
    """Append ``entries`` to the manifest at ``path`` (created with its header if missing,
    a link not followed) and fsync it: on disk before what they name is created."""
    payload = b"".join(json.dumps(e, sort_keys=True).encode() + b"\n" for e in entries)
    fd = os.open(os.fspath(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW,
                 0o644)
    try:
        if os.fstat(fd).st_size == 0:
            payload = json.dumps({"format": FORMAT}).encode() + b"\n" + payload
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def manifest_text(manifest: Manifest) -> str:
    """The compact text of ``manifest`` (to rewrite one atomically)."""
    entries = [{"format": FORMAT}]
    entries += [{"folder": rel} for rel in sorted(manifest.folders - manifest.open)]
    entries += [{"folder": rel, "open": True} for rel in sorted(manifest.open)]
    entries += [{"file": rel} for rel in sorted(manifest.files)]
    return "".join(json.dumps(e, sort_keys=True) + "\n" for e in entries)


def walk(folder: str | os.PathLike) -> dict[str, int]:
    """Every entry below ``folder`` as ``{relative path: st_mode}`` (from ``lstat``:
    symbolic links are listed, never followed)."""
    found: dict[str, int] = {}
    for root, dirs, files in os.walk(folder, followlinks=False):
        rel = os.path.relpath(root, folder)
        for name in dirs + files:
            sub = name if rel == "." else f"{PurePosixPath(rel).as_posix()}/{name}"
            try:
                found[sub] = os.lstat(os.path.join(root, name)).st_mode
            except FileNotFoundError:
                continue
    return found


def unknown_entries(entries: dict[str, int], manifest: Manifest) -> list[str]:
    """The entries of :func:`walk` that ``manifest`` does not cover, sorted."""
    return sorted(rel for rel in entries if not manifest.covers(rel))


def unsafe_entries(entries: dict[str, int], manifest: Manifest) -> list[str]:
    """The covered entries that :func:`remove_owned` would refuse: links, special files,
    a listed file that is a folder or a listed folder that is not one."""
    def ok(rel: str, mode: int) -> bool:
        if stat.S_ISDIR(mode):
            return rel not in manifest.files or rel in manifest.folders
        return stat.S_ISREG(mode) and (rel not in manifest.folders or rel in manifest.files)

    return [rel for rel, mode in sorted(entries.items())
            if manifest.covers(rel) and not ok(rel, mode)]


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def _open_dir(name: str, dir_fd: int | None, where: str) -> int:
    """Open the folder ``name`` without following a link (``ELOOP``/``ENOTDIR`` refused)."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as e:
        if e.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        raise UnsafeEntryError(f"{where} is a symbolic link or not a folder: it is not "
                               "followed") from None


def _open_parent(root: int, rel: str) -> tuple[int, str]:
    """A descriptor of the folder holding ``rel`` below ``root`` (each step refuses a link),
    and ``rel``'s last name. The caller closes the descriptor."""
    *parents, name = rel.split("/")
    fd = os.dup(root)
    try:
        for i, part in enumerate(parents):
            sub = _open_dir(part, fd, "/".join(parents[:i + 1]))
            os.close(fd)
            fd = sub
    except BaseException:
        os.close(fd)
        raise
    return fd, name


def _unlink_regular(dir_fd: int, name: str, where: str) -> None:
    """Remove ``name`` in ``dir_fd`` if it is a regular file; refuse anything else."""
    try:
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise UnsafeEntryError(f"{where} is not a regular file (a link, a folder or a special "
                               "file): not removed")
    os.unlink(name, dir_fd=dir_fd)


def _remove_tree(dir_fd: int, name: str, where: str) -> None:
    """Remove the folder ``name`` and below: regular files and folders only (anything else
    refused with :class:`UnsafeEntryError`)."""
    try:
        fd = _open_dir(name, dir_fd, where)
    except FileNotFoundError:
        return
    try:
        for entry in os.scandir(fd):
            sub = f"{where}/{entry.name}"
            if entry.is_dir(follow_symlinks=False):
                _remove_tree(fd, entry.name, sub)
            else:
                _unlink_regular(fd, entry.name, sub)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=dir_fd)


def _at(root: int, rel: str, action) -> None:
    """``action(dir_fd, name, rel)`` in the folder holding ``rel`` below ``root`` (nothing if
    a folder on the way is gone)."""
    try:
        fd, name = _open_parent(root, rel)
    except FileNotFoundError:
        return
    try:
        action(fd, name, rel)
    finally:
        os.close(fd)


def remove_owned(folder: str | os.PathLike, manifest: Manifest,
                 roots: Iterable[str] | None = None) -> None:
    """Remove what ``manifest`` lists below ``folder``: its regular files, the whole content
    of its open folders, then its folders, deepest first, each only if empty; with ``roots``,
    only the entries at or below those top-level names.

    Each folder is opened with ``O_NOFOLLOW`` relative to its parent's descriptor: a symbolic
    link anywhere on the way (a listed folder replaced by a link, even after
    :func:`unsafe_entries` was checked), or anything neither a regular file nor a folder, is
    never followed and raises :class:`UnsafeEntryError` naming it; nothing outside ``folder``
    is touched."""
    chosen = None if roots is None else set(roots)

    def wanted(rel: str) -> bool:
        return chosen is None or rel.split("/", 1)[0] in chosen

    root = _open_dir(os.fspath(folder), None, os.fspath(folder))
    try:
        for rel in sorted(filter(wanted, manifest.files)):
            _at(root, rel, _unlink_regular)
        for rel in sorted(filter(wanted, manifest.folders), key=lambda r: -r.count("/")):
            opened = rel in manifest.open or any(rel.startswith(o + "/") for o in manifest.open)
            _at(root, rel, _remove_tree if opened else _rmdir_if_empty)
    finally:
        os.close(root)


def _rmdir_if_empty(dir_fd: int, name: str, where: str) -> None:
    try:
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(mode):
        raise UnsafeEntryError(f"{where} is listed as a folder and is not one: not removed")
    try:
        os.rmdir(name, dir_fd=dir_fd)
    except OSError as e:
        if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
