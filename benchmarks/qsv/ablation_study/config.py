"""The settings of the QSV ablation study: its variants, the paper's numbers per dataset, the
configuration of one table and the presets (full and quick) of every dataset."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

from quest_geometric._utils import check_choice

#: The graph rows of the table, in order: the models that
#: :func:`~benchmarks.qsv.ablation_study.variants.qsv_variant` builds.
GRAPH_VARIANTS = ("qsv", "no_transport", "uniform", "standard_attention", "lattice")
#: Every row of the table, in order: the graph rows and ResNet-20 on the images.
VARIANTS = GRAPH_VARIANTS + ("resnet20",)
#: The datasets of ``--dataset``.
DATASETS = ("cifar10", "cifar100", "digits")
_QSV_TYPE = ("qsv", "no_transport", "uniform", "lattice")

#: What each row is, as the table and the findings name it.
DESCRIPTIONS = {"qsv": "QSV (sphere)", "no_transport": "QSV, no transport",
                "uniform": "QSV, uniform attention",
                "standard_attention": "standard attention W_Q,W_K,W_V (sphere, param-matched)",
                "lattice": "QSV on the flat lattice",
                "resnet20": "ResNet-20 (image; not parameter-matched)"}

#: The paper's numbers: test accuracy in percent (``paper``) and the difference to full QSV
#: in points (``paper_delta``); NaN where the paper gives none (ResNet-20 is "within 2.1
#: points" of the lattice). The digits table carries the CIFAR-10 numbers for reference.
PAPER: dict[str, dict[str, tuple[float, float]]] = {
    "cifar10": {
        "qsv": (85.9, 0.0),
        "no_transport": (math.nan, -4.0),
        "uniform": (math.nan, 0.0),
        "standard_attention": (87.3, 1.4),
        "lattice": (91.1, 5.2),
        "resnet20": (93.2, 7.3),
    },
    "cifar100": {
        "qsv": (math.nan, 0.0),
        "no_transport": (math.nan, -4.0),
        "uniform": (math.nan, 0.0),
    },
}
PAPER["digits"] = PAPER["cifar10"]
#: Where the :data:`PAPER` numbers of each dataset's table come from, as its notes say.
PAPER_SOURCE = {"cifar10": "CIFAR-10", "cifar100": "CIFAR-100",
                "digits": "CIFAR-10 (the paper has no digits run)"}

#: Test images and image side of each dataset (what one test image is worth, in points).
TEST_SET = {"digits": (360, 8), "cifar10": (10_000, 32), "cifar100": (10_000, 32)}


@dataclass
class AblationConfig:
    r"""The settings shared by every variant of one ablation table.

    Args:
        channels (int): QSVNet width (a multiple of ``4 * heads``). (default: :obj:`64`)
        heads (int): attention heads. (default: :obj:`4`)
        num_layers (int): QSVNet blocks. (default: :obj:`4`)
        mlp_ratio (float): MLP width over ``channels``. (default: :obj:`2.0`)
        dropout (float): QSVNet dropout. (default: :obj:`0.0`)
        stem (str): QSVNet stem, ``'linear'`` or ``'conv'``. (default: :obj:`'linear'`)
        readout (str): ``'mean'`` or ``'outer'``. (default: :obj:`'mean'`)
        temperature (float or str, optional): QSVConv logit scale (``None`` = the paper's
            unscaled logit, or ``'learned'``). (default: :obj:`None`)
        positions (str): how the graph models see where a node is: ``'features'`` appends
            its centred coordinates to its pixel values (:class:`AppendPosition`),
            ``'embedding'`` a learned per-node embedding, ``'none'`` nothing (positions only
            through the graph). (default: :obj:`'features'`)
        sphere_sizes (tuple of int): nodes per Fibonacci shell. (default: :obj:`(64, 256,
            1024)`)
        k (int): within-shell neighbours. (default: :obj:`12`)
        k_cross (int): cross-shell neighbours. (default: :obj:`4`)
        lattice_k (int): lattice neighbours. (default: :obj:`8`)
        epochs (int): training epochs. (default: :obj:`100`)
        batch_size (int): global batch size. (default: :obj:`128`)
        eval_batch_size (int): evaluation batch size. (default: :obj:`256`)
        lr (float): AdamW peak learning rate. (default: :obj:`1e-3`)
        min_lr (float): final cosine learning rate. (default: :obj:`1e-5`)
        weight_decay (float): AdamW decoupled weight decay. (default: :obj:`0.05`)
        warmup_epochs (float): linear warmup. (default: :obj:`5.0`)
        grad_clip (float, optional): gradient-norm clip. (default: :obj:`1.0`)
        label_smoothing (float): cross-entropy label smoothing. (default: :obj:`0.0`)
        augment (bool): the dataset's standard augmentation on the training split.
            (default: :obj:`True`)
        train_limit (int, optional): use only the first ``train_limit`` training images.
            (default: :obj:`None`)
        test_limit (int, optional): use only the first ``test_limit`` test images.
            (default: :obj:`None`)
        analysis_samples (int): test graphs on which the entropy and angle histograms are
            measured (the test-time ablations use the whole test split). (default: :obj:`512`)
        eval_every (int): evaluate every this many epochs (the last is always evaluated).
            (default: :obj:`1`)
    """

    channels: int = 64
    heads: int = 4
    num_layers: int = 4
    mlp_ratio: float = 2.0
    dropout: float = 0.0
    stem: str = "linear"
    readout: str = "mean"
    temperature: Optional[Union[float, str]] = None
    positions: str = "features"
    sphere_sizes: tuple = (64, 256, 1024)
    k: int = 12
    k_cross: int = 4
    lattice_k: int = 8
    epochs: int = 100
    batch_size: int = 128
    eval_batch_size: int = 256
    lr: float = 1e-3
    min_lr: float = 1e-5
    weight_decay: float = 0.05
    warmup_epochs: float = 5.0
    grad_clip: Optional[float] = 1.0
    label_smoothing: float = 0.0
    augment: bool = True
    train_limit: Optional[int] = None
    test_limit: Optional[int] = None
    analysis_samples: int = 512
    eval_every: int = 1

    def __post_init__(self) -> None:
        self.sphere_sizes = tuple(self.sphere_sizes)
        for name in ("channels", "heads", "num_layers", "k", "lattice_k", "epochs", "batch_size",
                     "eval_batch_size", "analysis_samples", "train_limit", "test_limit"):
            v, optional = getattr(self, name), name.endswith("_limit")
            if (v is not None or not optional) and (isinstance(v, bool)
                                                    or not isinstance(v, int) or v < 1):
                raise ValueError(f"AblationConfig.{name} must be "
                                 f"{'None or ' if optional else ''}a positive int, got {v!r}")
        if self.channels % (4 * self.heads):
            raise ValueError(f"AblationConfig.channels={self.channels} must be a multiple of "
                             f"4 * heads = {4 * self.heads}")
        if self.positions not in ("features", "embedding", "none"):
            raise ValueError("AblationConfig.positions must be 'features', 'embedding' or "
                             f"'none', got {self.positions!r}")
        if not self.sphere_sizes or any(isinstance(s, bool) or not isinstance(s, int) or s < 2
                                        for s in self.sphere_sizes):
            raise ValueError("AblationConfig.sphere_sizes must be a non-empty tuple of ints "
                             f">= 2, got {self.sphere_sizes!r}")

    def replace(self, **changes: Any) -> "AblationConfig":
        """A validated copy with ``changes`` applied (:obj:`None` values are ignored)."""
        fields = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - fields)
        if unknown:
            raise TypeError(f"qsv_ablation: unknown overrides {unknown}; expected "
                            f"AblationConfig fields {sorted(fields)}")
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})

    def tag(self) -> str:
        """A short hash of every field (all of them shape the runs)."""
        blob = json.dumps(dataclasses.asdict(self), sort_keys=True, default=str)
        return hashlib.sha1(blob.encode()).hexdigest()[:10]


#: The full digits configuration: width 32, 2 heads, 3 blocks, sphere shells of 16 and 64
#: nodes (in-degree 8 + 2), batch 32, AdamW lr 2e-3 -> 1e-4 over 60 epochs with 1 warmup
#: epoch, evaluated every 5 epochs; no augmentation (the crop-pad shift cuts a row of ink off
#: most 8 x 8 digits), and 60 epochs let QSV fit the clean training images.
DIGITS = AblationConfig(channels=32, heads=2, num_layers=3, sphere_sizes=(16, 64), k=8,
                        k_cross=2, epochs=60, batch_size=32, eval_batch_size=128, lr=2e-3,
                        min_lr=1e-4, weight_decay=0.05, warmup_epochs=1.0, augment=False,
                        eval_every=5, analysis_samples=360)


#: Per dataset, the full and the ``quick`` configuration. The digits presets use no
#: augmentation (the crop-pad shift cuts a row of ink off most 8 x 8 digits).
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


def _check_seeds(seeds: Optional[Sequence[int]]) -> tuple[int, ...]:
    seeds = (0, 1, 2, 3, 4) if seeds is None else tuple(seeds)
    if not seeds or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in seeds) \
            or len(set(seeds)) != len(seeds):
        raise ValueError(f"qsv_ablation: seeds must be distinct ints >= 0, got {seeds!r}")
    return seeds
