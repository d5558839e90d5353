"""Measurements of one trained QSV-type model: attention entropy, rotation angles and the
test-time ablations, with fixed-bin histograms."""
from __future__ import annotations

import math
from typing import Any, Union

import torch
from torch import Tensor, nn

from benchmarks.qsv.ablation_study.config import _QSV_TYPE, AblationConfig


def _histograms(entropy: Any, angles: Tensor, bins_entropy: int = 50,
                bins_angle: int = 36) -> dict[str, Any]:
    ent = entropy.entropy[:, entropy.valid]  # [L, n, H]
    deg = angles.double() * (180.0 / math.pi)
    return {
        "entropy_edges": torch.linspace(0, 1, bins_entropy + 1).tolist(),
        "entropy_counts": [torch.histc(ent[layer].float(), bins_entropy, 0.0, 1.0).tolist()
                           for layer in range(ent.size(0))],
        "angle_edges": torch.linspace(0, 180, bins_angle + 1).tolist(),
        "angle_counts": [torch.histc(deg[layer].float(), bins_angle, 0.0, 180.0).tolist()
                         for layer in range(deg.size(0))],
    }


def analyse_model(model: nn.Module, variant: str, test: Any, cfg: AblationConfig,
                  device: Union[str, torch.device]) -> dict[str, Any]:
    """Entropy, rotation angles (on the first ``cfg.analysis_samples`` test graphs) and the
    test-time ablations (on the whole test split) of one trained model; scalar summaries
    and fixed-bin histograms."""
    from torch_geometric.loader import DataLoader

    from quest_geometric.analysis.qsv import (ablation_accuracy, attention_entropy_per_node,
                                              rotation_angles)

    n = min(cfg.analysis_samples, len(test))
    sub = DataLoader(test.index_select(list(range(n))) if n < len(test) else test,
                     batch_size=cfg.eval_batch_size)
    model = model.to(device)
    ent = attention_entropy_per_node(model, sub, device)
    values = ent.entropy[:, ent.valid]
    out: dict[str, Any] = {
        "entropy_mean": float(values.mean()),
        "entropy_frac_above_0.95": float((values > 0.95).double().mean()),
    }
    for layer in range(values.size(0)):
        out[f"entropy_mean_l{layer}"] = float(values[layer].mean())
    if variant in _QSV_TYPE:
        ang = rotation_angles(model, sub, device)
        deg = ang.double() * (180.0 / math.pi)
        out.update({
            "angle_mean_deg": float(deg.mean()),
            "angle_median_deg": float(deg.flatten().median()),
            "angle_frac_below_10deg": float((deg < 10.0).double().mean()),
        })
        acc = ablation_accuracy(model, DataLoader(test, batch_size=cfg.eval_batch_size), device)
        out.update({f"acc_{k}" if not k.startswith("delta") else k: 100.0 * v
                    for k, v in acc.items()})
        out["histograms"] = _histograms(ent, ang)
    else:
        out["histograms"] = _histograms(ent, torch.zeros(values.size(0), 0, 1))
    return out
