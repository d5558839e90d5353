r"""Convert router files of earlier versions (a version-2 folder, whose digest covered the
tensors alone, or a pickled ``focus_routers.pt``) to the format of
:func:`~quest_geometric.nn.focus.router_files.save_routers`.

Command line::

    python -m quest_geometric.nn.focus.convert_routers OLD NEW [--allow-pickle]

``NEW`` may be ``OLD``. A ``.pt`` file is read with ``torch.load(weights_only=True)``;
``--allow-pickle`` unpickles it in full, which can run code: only for a file you wrote
yourself.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional

from quest_geometric.nn.focus.router_files import read_legacy_routers, write_router_files

__all__ = ["convert_routers"]


def convert_routers(old: str | os.PathLike, new: str | os.PathLike,
                    allow_pickle: bool = False) -> str:
    r"""Write the routers of the old-format files at :obj:`old` into the folder :obj:`new` in the
    current format: the same tensors, bitwise, and the recorded arguments and versions.

    Args:
        old (str or os.PathLike): a version-2 folder or file, a ``focus_routers.pt`` file,
            or a folder holding one.
        new (str or os.PathLike): the folder to write (may be the old one).
        allow_pickle (bool): unpickle a ``.pt`` file in full (it can run code) instead of
            ``torch.load(weights_only=True)`` (default: :obj:`False`).

    Returns:
        str: :obj:`new`.

    Raises:
        FileNotFoundError: if :obj:`old` does not exist.
        ValueError: if :obj:`old` is refused (not a router file, a wrong digest, non-finite
            weights, a configuration out of bounds, or a pickle ``weights_only`` refuses).
    """
    config, tensors, record = read_legacy_routers(old, "convert_routers",
                                                  allow_pickle=allow_pickle)
    layers: List[str] = []
    for name in tensors:  # "{layer}.{router key}", in file order
        layer = name.rsplit(".", 1)[0]
        for k in ("lin.weight", "lin.bias"):
            if name.endswith("." + k):
                layer = name[:-len(k) - 1]
        if layer not in layers:
            layers.append(layer)
    record = record or {}
    saved = record.get("layers")  # a version-2 record keeps the model's layer order
    if isinstance(saved, list) and sorted(map(str, saved)) == sorted(layers):
        layers = [str(x) for x in saved]
    write_router_files(new, config, layers, tensors, versions=record.get("versions"))
    return os.fspath(new)


def main(argv: Optional[List[str]] = None) -> int:
    """The command line: exit status 0 with the new folder printed, or 2 with one line."""
    p = argparse.ArgumentParser(prog="python -m quest_geometric.nn.focus.convert_routers",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("old", help="a version-2 router folder, a focus_routers.pt file or its "
                   "folder")
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
