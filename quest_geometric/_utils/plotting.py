"""Matplotlib as an optional dependency (the ``bench`` extra)."""
from __future__ import annotations

from typing import Any, Optional


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
