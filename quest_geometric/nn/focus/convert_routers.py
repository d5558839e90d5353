r"""Convert router files of earlier versions (``focus_routers.pt``, a pickle) to the
shareable format of :func:`~quest_geometric.nn.focus.router_files.save_routers`
(``focus_routers.safetensors`` + ``focus_routers.json``).

Command line::

    python -m quest_geometric.nn.focus.convert_routers OLD NEW [--allow-pickle]

``OLD`` is a ``focus_routers.pt`` file or its folder, ``NEW`` the folder to write. The old
file is read with ``torch.load(weights_only=True)``; ``--allow-pickle`` unpickles it in full,
which can run code: only for a file you wrote yourself.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional

from quest_geometric.nn.focus.router_files import (
    LEGACY_ROUTERS_FILE,
    _write_router_files,
    read_legacy_routers,
)

__all__ = ["convert_routers"]


def convert_routers(old: str | os.PathLike, new: str | os.PathLike,
                    allow_pickle: bool = False) -> str:
    r"""Write the routers of the old-format file :obj:`old` (or its folder) into the folder
    :obj:`new` in the :func:`~quest_geometric.nn.focus.router_files.save_routers` format: the same
    tensors, bitwise, and the recorded composition arguments.

    Args:
        old (str): a ``focus_routers.pt`` file or a folder holding one.
        new (str): the folder to write (created if missing; may be the old folder).
        allow_pickle (bool): unpickle the old file in full (it can run code; only for a file
            you wrote yourself) instead of ``torch.load(weights_only=True)``
            (default: :obj:`False`).

    Returns:
        str: :obj:`new`.

    Raises:
        FileNotFoundError: if :obj:`old` does not exist.
        ValueError: if :obj:`old` is refused (not a router file, non-finite weights, or a
            pickle that ``weights_only=True`` refuses).
    """
    old = os.fspath(old)
    if os.path.isdir(old):
        old = os.path.join(old, LEGACY_ROUTERS_FILE)
    if not os.path.isfile(old):
        raise FileNotFoundError(f"convert_routers: no file {old!r}")
    config, tensors = read_legacy_routers(old, "convert_routers", allow_pickle=allow_pickle)
    layers: List[str] = []
    for name in tensors:  # "{layer}.{router key}", in file order
        layer = name.rsplit(".", 1)[0]
        for k in ("lin.weight", "lin.bias"):
            if name.endswith("." + k):
                layer = name[:-len(k) - 1]
        if layer not in layers:
            layers.append(layer)
    return _write_router_files(os.fspath(new), config, layers, tensors)


def main(argv: Optional[List[str]] = None) -> int:
    """The command line: exit status 0 with the new folder printed, or 2 with one line."""
    p = argparse.ArgumentParser(prog="python -m quest_geometric.nn.focus.convert_routers",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("old", help="a focus_routers.pt file or its folder")
    p.add_argument("new", help="the folder to write the safetensors + JSON routers to")
    p.add_argument("--allow-pickle", action="store_true",
                   help="unpickle the old file in full (can run code: only your own files)")
    a = p.parse_args(argv)
    try:
        out = convert_routers(a.old, a.new, allow_pickle=a.allow_pickle)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
