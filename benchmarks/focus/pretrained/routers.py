"""Reading and writing router weights: every place the experiment loads routers from a file
or saves its training checkpoint, so that how routers are stored is decided here alone."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from quest_geometric.training.routers import (
    CHECKPOINT_RECORD,
    CHECKPOINT_TENSORS,
    read_router_checkpoint,
    set_router_params,
)





def load_router_weights(model: Any, path: str | Path) -> Any:
    r"""Set the routers of a composed ``model`` from ``path``: either a training checkpoint
    (the run folder of :func:`train_routers` or one of its checkpoint files, router
    parameters in
    :func:`~quest_geometric.nn.focus.router_parameters` order) or a
    :func:`~quest_geometric.nn.focus.save_routers` folder (or one of its files), such as the
    routers committed
    under ``benchmarks/focus/results/``, so a fresh clone can time the committed routers without
    retraining them.

    A :func:`~quest_geometric.nn.focus.save_routers` file goes to
    :func:`~quest_geometric.nn.focus.load_routers`, which refuses a model composed with
    another ``window`` or ``num_groups`` than the recorded one (the routers would run with
    another pattern than the one they were trained for).

    Raises:
        FileNotFoundError: if ``path`` is neither.
        ValueError: if the checkpoint's routers do not fit the model, or the model is
            composed with another ``window`` / ``num_groups`` than the saved routers.
    """
    from quest_geometric.nn.focus import load_routers, router_parameters

    path = Path(path)
    run = path if path.is_dir() else path.parent
    if (path.is_dir() and (path / CHECKPOINT_RECORD).is_file()) or path.name in (
            CHECKPOINT_RECORD, CHECKPOINT_TENSORS):
        blob = read_router_checkpoint(run)
        set_router_params(list(router_parameters(model)), blob, run / CHECKPOINT_RECORD,
                          "load_router_weights")
        return model
    if path.is_dir() or path.suffix in (".safetensors", ".json"):
        if path.exists():
            return load_routers(model, str(path))
    raise FileNotFoundError(f"load_router_weights: no routers at {str(path)!r} (expected "
                            f"a train_routers run folder or a save_routers folder)")




def load_saved_routers(model: Any, folder: str | Path) -> Any:
    """Compose ``model`` with the routers of a :func:`~quest_geometric.nn.focus.save_routers`
    folder (:func:`~quest_geometric.nn.focus.load_routers`: the composition it records)."""
    from quest_geometric.nn.focus import load_routers

    return load_routers(model, str(folder))


def save_trained_routers(model: Any, folder: str | Path) -> None:
    """Save the routers of a composed ``model`` to ``folder``
    (:func:`~quest_geometric.nn.focus.save_routers`), read back by
    :func:`load_saved_routers` and :func:`load_router_weights`."""
    from quest_geometric.nn.focus import save_routers

    save_routers(model, str(folder))
