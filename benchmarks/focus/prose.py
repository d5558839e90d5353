r"""Out-of-domain English prose that exists offline on a Debian system: licence texts and the
release notes Debian maintainers write, as token blocks for a pretrained tokenizer.

Neither source is Python documentation, so a model adapted to the language reference
(:mod:`quest_geometric.datasets.pydoc_text`) meets them as unseen text. The files differ
between systems, so :func:`ood_prose_blocks` records every file it read with its SHA-256.

**Sources** (deterministic for a given file system):

- ``'licenses'``: the regular files (not symbolic links) directly in
  ``/usr/share/common-licenses``; of a family with several versions (the name before its last
  ``-``, e.g. ``GPL-2``, ``GPL-3``) only the highest (numerically, dot by dot), since versions
  of one licence share most of their text.
- ``'debian-news'``: every ``/usr/share/doc/<package>/NEWS.Debian.gz``, packages in sorted
  order, without the maintainer's signature lines (starting ``" -- "``: names and dates).

Each source's files are joined with ``"\n\n"`` and tokenized once without special tokens;
blocks are consecutive slices of one source's tokens, the remainder dropped.

**Pinned files.** Installing one package shifts every later block. To compare results across
machines, pass ``files``: the exact list a result was computed on (as :func:`read_prose`
records it). Only those files are read, in that order, each checked against its SHA-256; a
missing file or other bytes under its name is refused with the file named.
"""
from __future__ import annotations

import gzip
import hashlib
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional, Union

import torch
from torch import Tensor

from quest_geometric._utils.checks import check_int

__all__ = ["PROSE_SOURCES", "prose_files", "read_prose", "ood_prose_blocks"]

#: Each source's default root folder.
PROSE_SOURCES = {"licenses": "/usr/share/common-licenses", "debian-news": "/usr/share/doc"}


def _version_key(v: str) -> tuple:
    return tuple(int(x) if x.isdigit() else -1 for x in v.split("."))


def prose_files(source: str, root: Optional[Union[str, os.PathLike]] = None) -> list[Path]:
    r"""The files a source reads, by the rule of the module docstring.

    Args:
        source (str): ``'licenses'`` or ``'debian-news'``.
        root (str, optional): the folder to read instead of the system one.

    Returns:
        list[pathlib.Path]: the files in reading order (empty when none match).

    Raises:
        ValueError: for an unknown source.
        FileNotFoundError: when the root folder does not exist.
    """
    if source not in PROSE_SOURCES:
        raise ValueError(f"prose_files: 'source' must be one of {sorted(PROSE_SOURCES)}, got "
                         f"{source!r}")
    base = Path(root if root is not None else PROSE_SOURCES[source])
    if not base.is_dir():
        raise FileNotFoundError(f"prose_files: the folder of source {source!r} is missing: {base}")
    if source == "licenses":
        files = sorted(p for p in base.iterdir() if p.is_file() and not p.is_symlink())
        best: dict[str, tuple] = {}
        for p in files:
            m = re.fullmatch(r"(.+)-(\d+(?:\.\d+)*)", p.name)
            family, version = (m.group(1), m.group(2)) if m else (p.name, "")
            if family not in best or _version_key(version) > _version_key(best[family][0]):
                best[family] = (version, p)
        return sorted(p for _, p in best.values())
    return sorted(p for p in base.glob("*/NEWS.Debian.gz") if p.is_file())


def _read(path: Path, source: str) -> tuple[str, str]:
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    text = data.decode("utf-8", errors="replace")
    if source == "debian-news":
        text = "\n".join(line for line in text.splitlines() if not line.startswith(" -- "))
    return text.strip(), digest


def _pinned_paths(source: str, files: Sequence[Any]) -> list[tuple[Path, Optional[str]]]:
    if isinstance(files, (str, bytes)) or len(files) == 0:
        raise ValueError(f"read_prose: 'files' of source {source!r} must be a non-empty list "
                         f"of paths or {{'path', 'sha256'}} records, got {files!r}")
    out = []
    for f in files:
        if isinstance(f, dict):
            if "path" not in f:
                raise ValueError(f"read_prose: a record of 'files' has no 'path': {f!r}")
            out.append((Path(f["path"]), f.get("sha256")))
        else:
            out.append((Path(f), None))
    missing = [str(p) for p, _ in out if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"read_prose: {len(missing)} pinned file(s) of source "
                                f"{source!r} are missing on this machine: {missing[:5]}"
                                f"{' ...' if len(missing) > 5 else ''} (install the packages "
                                "named in their paths, or pin another list)")
    return out


def read_prose(source: str, root: Optional[Union[str, os.PathLike]] = None,
               files: Optional[Sequence[Any]] = None) -> tuple[str, list[dict]]:
    r"""The text of one source and the record of the files it came from.

    Args:
        source (str): ``'licenses'`` or ``'debian-news'``.
        root (str, optional): the folder to read instead of the system one.
        files (list, optional): read exactly these files, in this order, instead of the
            source's rule: paths, or records ``{'path', 'sha256'}`` as this function returns
            them, each checked against its SHA-256 (module docstring, *Pinned files*).

    Returns:
        ``(text, files)``: the files' texts joined with ``"\n\n"``, and one dict per file
        (``path``, ``sha256`` of the file's bytes as stored, ``chars`` of its text).

    Raises:
        FileNotFoundError: when the folder is missing or no file matches, naming both, or
            when a pinned file is missing.
        ValueError: when a pinned file's SHA-256 differs from its record, or for a
            malformed ``files``.
    """
    if files is not None:
        if source not in PROSE_SOURCES:
            raise ValueError(f"read_prose: 'source' must be one of {sorted(PROSE_SOURCES)}, "
                             f"got {source!r}")
        pinned = _pinned_paths(source, files)
    else:
        paths = prose_files(source, root)
        if not paths:
            where = root if root is not None else PROSE_SOURCES[source]
            pattern = "*/NEWS.Debian.gz" if source == "debian-news" else "regular licence files"
            raise FileNotFoundError(f"read_prose: source {source!r} found no {pattern} in "
                                    f"{where}")
        pinned = [(p, None) for p in paths]
    texts, record = [], []
    for path, want in pinned:
        text, digest = _read(path, source)
        if want is not None and digest != want:
            raise ValueError(f"read_prose: pinned file {path} of source {source!r} has "
                             f"SHA-256 {digest[:16]}..., its record says {want[:16]}...: "
                             "this machine holds another version of it")
        if text:
            texts.append(text)
            record.append({"path": str(path), "sha256": digest, "chars": len(text)})
    return "\n\n".join(texts), record


def ood_prose_blocks(tokenizer: Any, block_len: int = 1024, min_blocks: int = 8,
                     sources: Sequence[str] = ("licenses", "debian-news"),
                     roots: Optional[dict] = None, max_blocks_per_source: Optional[int] = None,
                     files: Optional[dict] = None) -> tuple[Tensor, dict[str, Any]]:
    r"""Token blocks of out-of-domain prose from every source, with the files they came from.

    Args:
        tokenizer: a Hugging Face tokenizer, or any object with
            ``encode(text, add_special_tokens=False) -> list[int]``.
        block_len (int): tokens per block (default: :obj:`1024`).
        min_blocks (int): fail unless at least this many blocks result (default: :obj:`8`).
        sources (Sequence[str]): the sources, each of which must give at least one block
            (default: both).
        roots (dict, optional): ``{source: folder}`` to read instead of the system folders.
        max_blocks_per_source (int, optional): keep at most this many blocks of each source.
        files (dict, optional): ``{source: [file records]}``: read exactly these files per
            source (:func:`read_prose`'s ``files``; the ``'files'`` of a previous record),
            so that the blocks are the same on every machine that has them.

    Returns:
        ``(blocks, record)``: a ``[B, block_len]`` LongTensor (sources in the given order) and
        ``{'block_source': [source of each block], 'sources': {source: {'files': [...],
        'tokens': int, 'blocks': int}}}``.

    Raises:
        FileNotFoundError: when a source's folder or files (pinned ones included) are missing.
        ValueError: when a source gives no full block, or all give fewer than ``min_blocks``,
            or a pinned file's SHA-256 differs from its record.
    """
    check_int(block_len, "'block_len'", 1, where="ood_prose_blocks")
    check_int(min_blocks, "'min_blocks'", 1, where="ood_prose_blocks")
    if max_blocks_per_source is not None:
        check_int(max_blocks_per_source, "'max_blocks_per_source' (or None)", 1,
                  where="ood_prose_blocks")
    if isinstance(sources, str) or len(sources) == 0:
        raise ValueError("ood_prose_blocks: 'sources' must be a non-empty list of names, got "
                         f"{sources!r}")
    roots, pins = dict(roots or {}), dict(files or {})
    unknown = sorted(set(pins) - set(sources))
    if unknown:
        raise ValueError(f"ood_prose_blocks: 'files' pins sources {unknown} that 'sources' "
                         f"{list(sources)} does not read")
    blocks, owner, record = [], [], {}
    for source in sources:
        text, files = read_prose(source, roots.get(source), files=pins.get(source))
        ids = list(tokenizer.encode(text, add_special_tokens=False))
        nb = len(ids) // block_len
        if max_blocks_per_source is not None:
            nb = min(nb, max_blocks_per_source)
        if nb == 0:
            raise ValueError(f"ood_prose_blocks: source {source!r} gives {len(ids)} tokens from "
                             f"{len(files)} file(s), fewer than one block of {block_len}")
        blocks.append(torch.tensor(ids[:nb * block_len], dtype=torch.long).view(nb, block_len))
        owner += [source] * nb
        record[source] = {"files": files, "tokens": len(ids), "blocks": nb}
    out = torch.cat(blocks)
    if len(out) < min_blocks:
        raise ValueError(f"ood_prose_blocks: the sources {list(sources)} give {len(out)} blocks of "
                         f"{block_len} tokens, fewer than 'min_blocks'={min_blocks}")
    return out, {"block_source": owner, "sources": record}
