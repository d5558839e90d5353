"""The conditions of a measurement: the machine, the software and the load it ran under."""
from __future__ import annotations

import datetime
import os
import platform
import sys
from pathlib import Path
from typing import Any

import torch

#: The keys of :func:`environment_info` that identify the machine instance.
MACHINE_KEYS = ("cpu_model", "boot_id")


def cpu_model() -> str | None:
    """The CPU's ``model name`` in ``/proc/cpuinfo`` (:obj:`None` where there is none): two
    virtual machines of one name can run on different hosts, so timings say which."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    return value.strip()
    except OSError:  # pragma: no cover - not Linux
        pass
    return None


def boot_id() -> str | None:
    """The kernel's random id of this boot (:obj:`None` where there is none): tables with
    different ids were timed on different machine instances, whose speeds can differ."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:  # pragma: no cover - not Linux
        return None


def environment_info() -> dict[str, Any]:
    """The machine and software a result was measured on: date (UTC), platform, processor,
    :func:`cpu_model`, :func:`boot_id`, CPU count, torch threads, the versions of Python,
    torch, PyG, SciPy and this package, whether torch-cluster / torch-scatter are usable, and
    the CUDA device name if any."""
    import scipy
    import torch_geometric

    from quest_geometric import __version__
    from quest_geometric.typing import WITH_TORCH_CLUSTER, WITH_TORCH_SCATTER

    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_model": cpu_model(),
        "boot_id": boot_id(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "torch_geometric": torch_geometric.__version__,
        "scipy": scipy.__version__,
        "quest_geometric": __version__,
        "torch_cluster": WITH_TORCH_CLUSTER,
        "torch_scatter": WITH_TORCH_SCATTER,
        "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
    }


def load_average() -> str:
    """The 1-, 5- and 15-minute load averages of ``/proc/loadavg`` (``'n/a'`` where there is
    none), written beside timings so a reader can tell a busy machine from an idle one."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:  # pragma: no cover - not Linux
        return "n/a"
