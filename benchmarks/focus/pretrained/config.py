"""Settings of the SmolLM2 + Focus experiment: the presets of ``--quick`` and of the full
run, the block order's chunk size and the model note written into every table."""
from __future__ import annotations

import os
from typing import Dict, Optional

#: The model as every table's ``meta`` names it.
MODEL_NOTE = "SmolLM2-135M-Instruct, Q4_1 (4-bit) weights dequantised to float32"

#: Training and evaluation sizes: router steps, tokens per block, validation blocks.
FULL = {"steps": 300, "block": 1024, "val_blocks": 8}
QUICK = {"steps": 6, "block": 256, "val_blocks": 2}

#: ``--speed --quick``: prompt lengths, tokens per mode and round, rounds.
SPEED_QUICK = {"contexts": (256, 512), "new_tokens": 4, "rounds": 2}


def preset(quick: bool) -> Dict[str, int]:
    """:data:`QUICK` or :data:`FULL`."""
    return QUICK if quick else FULL


def load_average() -> Optional[str]:
    """``/proc/loadavg`` (the machine's load when a table was written), or :obj:`None`."""
    return open("/proc/loadavg").read().strip() if os.path.exists("/proc/loadavg") else None
