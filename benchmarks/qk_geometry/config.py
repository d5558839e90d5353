"""The settings of the whole query/key geometry study: the pipeline's
:class:`~benchmarks.qk_geometry.trajectories.config.StudyConfig` with the intervention's
and the overhead measurement's fields, the control modes and the two presets."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from quest_geometric._utils import check_choice, check_int
from benchmarks.qk_geometry.trajectories import config as pipeline

INITS = pipeline.INITS
MODES = ("none", "hold", "shrink")


@dataclass
class StudyConfig(pipeline.StudyConfig):
    """Sizes of the study: those of the pipeline's
    :class:`~benchmarks.qk_geometry.trajectories.config.StudyConfig` (model, training,
    probing, the trajectory grid) and:

    Args:
        intervention_seeds (tuple): seeds of the intervention. (default: ``(0, 1, 2, 3, 4)``)
        intervention_depth (int): depth of the intervention runs. (default: ``4``)
        intervention_init (str): initialisation of the intervention runs.
            (default: ``'independent'``)
        shrink_decay (float): ``KeySpectrumControl`` decay per step for ``'shrink'``.
            (default: ``0.01``)
        control_per_head (bool): control each head's rows of :math:`W_K` separately.
            (default: :obj:`True`)
        overhead_depth (int): depth of the overhead measurement. (default: ``6``)
        overhead_steps (int): steps of each overhead run. (default: ``200``)
        overhead_probe_every (int): probe period of the overhead measurement.
            (default: ``100``)
        overhead_repeats (int): alternating repeats of each overhead variant. (default: ``3``)
    """

    intervention_seeds: tuple = (0, 1, 2, 3, 4)
    intervention_depth: int = 4
    intervention_init: str = "independent"
    shrink_decay: float = 0.01
    control_per_head: bool = True
    overhead_depth: int = 6
    overhead_steps: int = 200
    overhead_probe_every: int = 100
    overhead_repeats: int = 3

    #: The spectrum control shapes a run too (the same hash as before the pipeline was split).
    TAG_FIELDS = pipeline.StudyConfig.TAG_FIELDS + ("shrink_decay", "control_per_head")

    def __post_init__(self) -> None:
        super().__post_init__()
        self.intervention_seeds = tuple(self.intervention_seeds)
        for name in ("intervention_depth", "overhead_depth", "overhead_steps",
                     "overhead_probe_every", "overhead_repeats"):
            check_int(getattr(self, name), name, 1, where="StudyConfig")
        vals = self.intervention_seeds
        if not vals:
            raise ValueError("StudyConfig: intervention_seeds must be a non-empty tuple of ints "
                             f">= 0, got {vals!r}")
        for i, v in enumerate(vals):
            check_int(v, f"intervention_seeds[{i}] (of {vals!r})", 0, where="StudyConfig")
        if len(set(vals)) != len(vals):
            raise ValueError(f"StudyConfig: intervention_seeds has duplicates: {vals!r}")
        check_choice(self.intervention_init, "intervention_init", INITS, where="StudyConfig")
        if not (isinstance(self.shrink_decay, (int, float)) and self.shrink_decay >= 0):
            raise ValueError(f"StudyConfig: shrink_decay must be >= 0, got {self.shrink_decay!r}")


#: The full CPU configuration and the ``--quick`` one (the pipeline's quick configuration,
#: whose overhead measurement alternates twice).
FULL = StudyConfig()
QUICK = StudyConfig(**asdict(pipeline.QUICK), overhead_steps=200, overhead_repeats=2)
