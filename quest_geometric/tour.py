"""The main job: ``python -m quest_geometric tour``.

Runs a small version of each study on embedded data (no download) and writes one report
folder: ``report.md`` with the tables, PNG plots and the CSV/JSON behind them.  Each part is a
function registered in :data:`PARTS`; it receives the part's output folder and returns the
markdown section for the report.
"""
from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from quest_geometric.experiments.common import environment_info

#: File that marks a folder as a tour report, so a later run may overwrite it.
REPORT_MARKER = ".quest_geometric_report"


@dataclass
class TourContext:
    """What every tour part receives.

    Args:
        out_dir (Path): the part's own folder inside the report.
        device (torch.device): where to run.
        quick (bool): use the smallest settings (the default for the tour).
        progress (bool): show progress bars.
    """

    out_dir: Path
    device: torch.device
    quick: bool = True
    progress: bool = True
    summary: list[str] = field(default_factory=list)


def _part_qsv(ctx: TourContext) -> str:
    from quest_geometric.experiments import qsv_ablation, qsv_layer_speed

    # The benchmark's full digits model (its 'quick' preset is a smoke test that barely
    # learns); the tour's budget is one seed and 12 epochs, ~3 minutes on two cores.
    ablation = qsv_ablation.run(
        dataset="digits", quick=False, seeds=(0,) if ctx.quick else None,
        epochs=12 if ctx.quick else None, device=str(ctx.device), out_dir=ctx.out_dir,
        progress=ctx.progress,
        variants=("qsv", "no_transport", "uniform", "standard_attention", "lattice"),
    )
    speed = qsv_layer_speed.run(
        quick=ctx.quick, device=ctx.device, out_dir=ctx.out_dir, progress=ctx.progress
    )
    ctx.summary.extend(ablation["summary"] + speed["summary"])
    return ablation["markdown"] + "\n" + speed["markdown"]


def _part_focus(ctx: TourContext) -> str:
    from quest_geometric.experiments import focus_lm, focus_speed

    speed = focus_speed.run(quick=True, device=ctx.device, out_dir=ctx.out_dir,
                            progress=ctx.progress, memory=False, allocator="system")
    lm = focus_lm.run(quick=True, device=str(ctx.device), out_dir=ctx.out_dir,
                      progress=ctx.progress, run_dir=ctx.out_dir / "runs")
    ctx.summary.extend(speed["summary"] + lm["summary"])
    return speed["markdown"] + "\n" + lm["markdown"]


def _part_qk(ctx: TourContext) -> str:
    from quest_geometric.experiments import qk_geometry

    result = qk_geometry.run(quick=True, device=str(ctx.device), out_dir=ctx.out_dir,
                             progress=ctx.progress, parts=("trajectories",), depths=(4,),
                             seeds=(0,))
    ctx.summary.extend(result["summary"])
    return result["markdown"]


#: The parts of the tour, in the order they run: name -> (title, function).
PARTS: dict[str, tuple[str, Callable[[TourContext], str]]] = {
    "qsv": ("QSV: quaternion attention on Fibonacci-sphere graphs", _part_qsv),
    "focus": ("Focus: learned-centroid sparse attention", _part_focus),
    "qk": ("Query/key geometry: participation ratios and attention entropy", _part_qk),
}


class TourError(Exception):
    """A user error in the tour's arguments: reported as one line, exit status 2."""


def check_output_dir(out: Path, force: bool) -> None:
    """Refuse to overwrite a folder that is not a previous tour report (unless ``force``)."""
    if out.exists():
        if not out.is_dir():
            raise TourError(f"--out {out} exists and is not a folder")
        is_report = (out / REPORT_MARKER).exists()
        if any(out.iterdir()) and not is_report and not force:
            raise TourError(
                f"--out {out} exists and is not a previous tour report; "
                "choose another folder or pass --force to overwrite it"
            )


def resolve_device(device: str) -> torch.device:
    """Parse ``--device``; a CUDA request without a GPU is a :class:`TourError`."""
    try:
        dev = torch.device(device)
    except RuntimeError as e:
        raise TourError(f"--device {device!r} is not a valid torch device ({e})") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise TourError("--device cuda was requested but no CUDA GPU is available")
    if dev.type not in ("cpu", "cuda"):
        raise TourError(f"--device must be 'cpu' or 'cuda' (got {device!r})")
    return dev


def run_tour(
    out: str | Path = "tour-report",
    only: list[str] | None = None,
    device: str = "cpu",
    force: bool = False,
    quick: bool = True,
    progress: bool = True,
) -> Path:
    """Run the tour and write ``<out>/report.md``.

    Args:
        out (str): report folder. (default: :obj:`"tour-report"`)
        only (list of str, optional): run only these parts (names in :data:`PARTS`).
            (default: :obj:`None`, all)
        device (str): ``'cpu'`` or ``'cuda'``. (default: :obj:`"cpu"`)
        force (bool): overwrite a folder that is not a previous report. (default: :obj:`False`)
        quick (bool): smallest settings. (default: :obj:`True`)
        progress (bool): progress bars. (default: :obj:`True`)

    Returns:
        Path: the report file.

    Raises:
        TourError: unknown part, unusable output folder, or CUDA without a GPU.
    """
    names = list(PARTS) if not only else list(dict.fromkeys(only))
    unknown = [n for n in names if n not in PARTS]
    if unknown:
        raise TourError(f"--only: unknown part(s) {', '.join(unknown)}; choose from {', '.join(PARTS)}")
    dev = resolve_device(device)
    out = Path(out)
    check_output_dir(out, force)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / REPORT_MARKER).write_text("quest_geometric tour report\n")

    sections = ["# quest_geometric tour report\n"]
    summary: list[str] = []
    for name in names:
        title, fn = PARTS[name]
        ctx = TourContext(out_dir=out / name, device=dev, quick=quick, progress=progress)
        ctx.out_dir.mkdir()
        t0 = time.perf_counter()
        body = fn(ctx)
        sections.append(f"## {title}\n\n{body}\n\n_({time.perf_counter() - t0:.0f} s)_\n")
        summary.extend(f"[{name}] {line}" for line in ctx.summary)
    env = environment_info()
    sections.append("## Machine\n\n" + "\n".join(f"- {k}: {v}" for k, v in env.items()) + "\n")
    report = out / "report.md"
    report.write_text("\n".join(sections))
    for line in summary:
        print(line)
    print(f"report: {report}")
    return report
