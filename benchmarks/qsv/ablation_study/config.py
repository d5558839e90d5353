"""The settings of the QSV ablation study beyond the tour's digits table: ResNet-20, the
CIFAR datasets, the paper's numbers per dataset and the presets (full and quick)."""
from __future__ import annotations

import math
from typing import Any, Optional, Sequence

from quest_geometric._utils import check_choice
from benchmarks.qsv.pipelines import qsv_ablation
from benchmarks.qsv.pipelines.qsv_ablation import DIGITS, AblationConfig

#: The rows of the table, in order: the graph rows (the package's
#: :data:`~quest_geometric.pipelines.qsv_ablation.VARIANTS`) and ResNet-20 on the images.
VARIANTS = qsv_ablation.VARIANTS + ("resnet20",)
#: The datasets of ``--dataset``.
DATASETS = ("cifar10", "cifar100", "digits")
_QSV_TYPE = ("qsv", "no_transport", "uniform", "lattice")

DESCRIPTIONS = {**qsv_ablation.DESCRIPTIONS,
                "resnet20": "ResNet-20 (image; not parameter-matched)"}

#: The paper's numbers: test accuracy in percent (``paper``) and the difference to full QSV
#: in points (``paper_delta``); NaN where the paper gives none (ResNet-20 is "within 2.1
#: points" of the lattice). The digits table carries the CIFAR-10 numbers for reference.
PAPER: dict[str, dict[str, tuple[float, float]]] = {
    "cifar10": {**qsv_ablation.PAPER, "resnet20": (93.2, 7.3)},
    "cifar100": {
        "qsv": (math.nan, 0.0),
        "no_transport": (math.nan, -4.0),
        "uniform": (math.nan, 0.0),
    },
}
PAPER["digits"] = PAPER["cifar10"]
PAPER_SOURCE = {"cifar10": "CIFAR-10", "cifar100": "CIFAR-100",
                "digits": qsv_ablation.PAPER_SOURCE}

#: Test images and image side of each dataset (what one test image is worth, in points).
TEST_SET = {"digits": (360, 8), "cifar10": (10_000, 32), "cifar100": (10_000, 32)}

#: Per dataset, the full and the ``quick`` configuration. The digits presets use no
#: augmentation (the crop-pad shift cuts a row of ink off most 8 x 8 digits), and the full
#: one (the package's :data:`~quest_geometric.pipelines.qsv_ablation.DIGITS`) 60 epochs,
#: which let QSV fit the clean training images.
PRESETS: dict[str, dict[str, AblationConfig]] = {
    "cifar10": {
        "full": AblationConfig(),
        "quick": AblationConfig(epochs=2, warmup_epochs=0.5, train_limit=2048, test_limit=512,
                                analysis_samples=64),
    },
    "digits": {
        "full": DIGITS,
        "quick": AblationConfig(channels=16, heads=2, num_layers=2, sphere_sizes=(16, 64), k=8,
                                k_cross=2, epochs=2, batch_size=64, eval_batch_size=128,
                                lr=3e-3, min_lr=1e-4, warmup_epochs=0.5, augment=False,
                                analysis_samples=64),
    },
}
PRESETS["cifar100"] = PRESETS["cifar10"]


def _check_dataset(dataset: Any) -> str:
    return check_choice(dataset, "dataset", DATASETS, where="qsv_ablation")


def _check_variants(variants: Optional[Sequence[str]]) -> tuple[str, ...]:
    variants = tuple(VARIANTS if variants is None else variants)
    bad = [v for v in variants if v not in VARIANTS]
    if bad or not variants:
        raise ValueError(f"qsv_ablation: unknown variants {bad or variants}; expected a "
                         f"non-empty subset of {VARIANTS}")
    return variants
