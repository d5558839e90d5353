"""Saved routers evaluated again, without training."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from benchmarks.focus.pretrained.config import MODEL_NOTE, load_average, preset
from benchmarks.focus.pretrained.data import load_data
from benchmarks.focus.pretrained.evaluate import evaluate_modes
from quest_geometric.training import evaluate_lm
from benchmarks.focus.pretrained.report import (
    REEVAL_COLUMNS,
    REEVAL_NOTES,
    REEVAL_TITLE,
)
from benchmarks.focus.pretrained.routers import load_saved_routers


def evaluate_saved(folders: Sequence[str | Path], quick: bool = False,
                   out_dir: str | Path = "benchmarks/focus/results",
                   name: str = "focus_pretrained_reeval", block: Optional[int] = None,
                   val_blocks: Optional[int] = None, progress: bool = True,
                   gate_bias: Optional[float] = None) -> Dict[str, Any]:
    """Evaluate routers saved by :func:`~quest_geometric.nn.focus.save_routers` (such as
    the committed ``benchmarks/focus/results/<name>_routers_<gate><tag>`` folders) on the fixed
    validation blocks, without training: full attention, then for each folder its soft gate
    (not for ``straight_through``) and hard top-1, top-2 and top-:math:`K`, each with the
    per-block paired change against full attention
    (:func:`~benchmarks.focus.pretrained.paired_block_delta`). The
    composition (gate, window, :math:`K`, the additive gate's bias :math:`b`) is the one the
    folder records; ``gate_bias`` evaluates the soft rows with another :math:`b` instead (the
    hard rows do not depend on it), e.g. routers trained with :math:`b = 1/2` under the
    top-2 relaxation :math:`b = 1/8`.

    Where the folder sits beside the table of the run that trained it (``<name>.json``), its
    rows gain that table's ``steps`` and perplexity (``trained_val_ppl``), so the
    re-evaluation is checked against the original one.

    Raises:
        FileNotFoundError: if a folder holds no saved routers.
        ValueError: if a folder's router files are refused (damaged, changed, non-finite).
    """
    from quest_geometric.profile import write_results
    from quest_geometric.models.smollm2 import load_smollm2
    from quest_geometric.nn.focus import decompose, focus_layers
    from quest_geometric.nn.focus.router_files import read_routers

    folders = [Path(f) for f in folders]
    for f in folders:  # every folder read and checked (no pickle) before the model loads
        read_routers(f, "evaluate_saved")
    block = block if block is not None else preset(quick)["block"]
    val_blocks = val_blocks if val_blocks is not None else preset(quick)["val_blocks"]
    model, tok = load_smollm2()
    _, val, _, _ = load_data(tok, block, val_blocks)
    base = evaluate_lm(model, val, progress=progress, desc="full attention")
    rows: List[Dict[str, Any]] = [{"routers": "-", "gate": "-", "eval": "-",
                                   "val_ppl": base["val_ppl"], "delta_pct": 0.0,
                                   "pairs_kept": 1.0}]
    for f in folders:
        load_saved_routers(model, f)  # composed as the folder records
        model.eval()
        saved_bias = focus_layers(model)[0].gate_bias
        if gate_bias is not None:
            for layer in focus_layers(model):
                layer.gate_bias = gate_bias
        layer = focus_layers(model)[0]
        gate, k_groups = layer.gate, layer.num_groups
        # the rows of the run that saved the folder: <stem>.json beside <stem>_routers_<gate><tag>
        trained: Dict[str, Dict[str, Any]] = {}
        stem = f.name.split("_routers_")[0]
        table = f.parent / f"{stem}.json"
        if table.is_file():
            blob = json.loads(table.read_text())
            if f.name == f"{stem}_routers_{gate}{blob.get('meta', {}).get('tag', '')}":
                trained = {r["eval"]: r for r in blob.get("rows", []) if r.get("gate") == gate}
        for measured in evaluate_modes(model, val, base, gate, k_groups, progress,
                                        f.name):
            old = trained.get(measured["eval"], {})
            if measured["eval"] == "soft" and layer.gate_bias != saved_bias:
                old = {**old, "val_ppl": math.nan}  # another gate than the one trained
            rows.append({"routers": f.name, "gate": gate, "gate_bias": layer.gate_bias,
                         **measured,
                         "steps": old.get("steps", math.nan),
                         "trained_val_ppl": old.get("val_ppl", math.nan)})
        decompose(model)
    meta = {"model": MODEL_NOTE,
            "block": block, "val_blocks": int(val.size(0)), "quick": quick,
            "folders": [str(f) for f in folders], "gate_bias": gate_bias,
            "load": load_average()}
    paths = write_results(name, rows, out_dir, meta=meta, notes=REEVAL_NOTES,
                          columns=REEVAL_COLUMNS, title=REEVAL_TITLE)
    return {"rows": rows, "paths": paths}

