"""Matplotlib as an optional dependency (the ``bench`` extra), and saving a figure."""
from __future__ import annotations

import os
from typing import Any, Optional, Sequence, TypeVar, Union

#: A path as the caller passed it (returned unchanged by :func:`save_figure`).
PathT = TypeVar("PathT", bound=Union[str, os.PathLike])


def optional_pyplot(required: bool = False) -> Optional[Any]:
    """``matplotlib.pyplot`` on the non-interactive Agg backend, or :obj:`None` when
    matplotlib is not installed (an :class:`ImportError` naming the extra if ``required``)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        if required:
            raise ImportError("plotting needs matplotlib: pip install "
                              "'quest_geometric[bench]'") from None
        return None
    return plt


def save_figure(fig: Any, path: PathT, dpi: int = 120,
                rect: Optional[Sequence[float]] = None) -> PathT:
    """Lay out (``fig.tight_layout(rect=rect)``), save (``fig.savefig(path, dpi=dpi)``,
    the folder created if missing, the format from the suffix) and close (``plt.close(fig)``,
    freeing pyplot's registry) a finished pyplot figure; return ``path`` itself, so that a
    plotting function can end with ``return save_figure(fig, path)``.

    Args:
        fig: a :class:`matplotlib.figure.Figure` made with pyplot.
        path: the file to write.
        dpi: resolution of the saved image in dots per inch.
        rect: ``(left, bottom, right, top)`` in figure coordinates that the axes and their
            labels are fitted into (room above for a figure legend, say; :obj:`None`: all).
    """
    import matplotlib.pyplot as plt

    fig.tight_layout(rect=rect)
    os.makedirs(os.path.dirname(os.path.abspath(os.fspath(path))), exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path
