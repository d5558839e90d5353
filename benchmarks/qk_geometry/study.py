r"""Query expansion and key specialisation: the query/key geometry study on CharGPT.

Reproduces, at CPU scale, the measurements of Gupta et al., "Query Expansion and Key
Specialization in Transformer Attention Geometry" (2026; notes in
``shared/papers/qk_geometry.md``):

* **Trajectories**: the trajectory pipeline (:mod:`benchmarks.qk_geometry.trajectories`,
  whose docstring gives what is probed), over the full grid of depths, initialisations and
  seeds; the share of trajectories with :math:`\mathrm{PR}_Q > \mathrm{PR}_K` gets intervals
  over runs (:func:`write_run_bootstrap`).
* **Intervention.** :class:`~quest_geometric.analysis.spectral_control.KeySpectrumControl`
  ``'hold'`` vs ``'shrink'`` vs unconstrained over seeds; the per-seed sign of
  :math:`H_\text{shrink} - H_\text{hold}` and a sign test across seeds.
* **Pretrained analysis** (:func:`~benchmarks.qk_geometry.hf.hf_analysis`) and **overhead**
  (:func:`~benchmarks.qk_geometry.runs.measure_overhead`).

Every run lives in its own folder, so an interrupted study resumes where it stopped and a
finished run is never trained twice.

Run ``python -m benchmarks.qk_geometry.study`` (``--quick`` for the small CPU configuration,
``--hf-model PATH ...`` for the pretrained analysis).
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

import torch

from benchmarks.qk_geometry import report
from benchmarks.qk_geometry.config import FULL, QUICK, StudyConfig
from benchmarks.qk_geometry.hf import hf_analysis
from benchmarks.qk_geometry.plots import plot_hf, plot_intervention
from benchmarks.qk_geometry.records import read_records
from benchmarks.qk_geometry.runs import measure_overhead, run_intervention
from benchmarks.qk_geometry.summary import (HF_COLUMNS, INTERVENTION_COLUMNS,
                                            INTERVENTION_SEED_COLUMNS, INTERVENTION_TEST_COLUMNS,
                                            RUN_BOOTSTRAP_COLUMNS, intervention_summary,
                                            run_bootstrap_shares)
from quest_geometric._utils import atomic_write_text
from benchmarks.qk_geometry.trajectories import report as pipeline_report
from benchmarks.qk_geometry.trajectories.records import records_path
from benchmarks.qk_geometry.trajectories.study import configure, study_meta, write_trajectories
from quest_geometric.profile import markdown_table, write_results

#: The parts of :func:`run`.
PARTS = ("trajectories", "intervention", "overhead", "hf")


def run(quick: bool = False, device: str = "cpu",
        out_dir: Union[str, os.PathLike] = "benchmarks/qk_geometry/results",
        progress: bool = True, parts: Sequence[str] = ("trajectories", "intervention", "overhead"),
        hf_models: Optional[Sequence[Union[str, os.PathLike]]] = None,
        hf_byte_fallback: bool = False, name: str = "qk_geometry", **overrides: Any
        ) -> dict[str, Any]:
    """Run the study and write its tables, JSON lines and plots to ``out_dir``.

    Files: ``<name>_trajectories.{csv,json,md}``, ``<name>_records.jsonl.gz`` (every probe
    record), ``<name>_share_bootstrap.*``, the figures, ``<name>_intervention.*``,
    ``<name>_overhead.*``, ``<name>_hf.*`` and the report ``<name>.md``. Training runs live
    in ``out_dir/<name>_runs/<config hash>/<run>/`` (resumed or reused).

    Args:
        quick (bool): :data:`~benchmarks.qk_geometry.config.QUICK` instead of
            :data:`~benchmarks.qk_geometry.config.FULL`. (default: :obj:`False`)
        device (str): training device. (default: ``'cpu'``)
        out_dir (path): result folder. (default: ``'benchmarks/qk_geometry/results'``)
        progress (bool): progress bars. (default: :obj:`True`)
        parts (sequence of str): any of ``'trajectories'``, ``'intervention'``,
            ``'overhead'``, ``'hf'``. (default: the first three)
        hf_models (sequence of path, optional): checkpoint folders for ``'hf'`` (implies it).
            (default: :obj:`None`)
        hf_byte_fallback (bool): see :func:`~benchmarks.qk_geometry.hf.hf_analysis`.
            (default: :obj:`False`)
        name (str): file stem. (default: ``'qk_geometry'``)
        **overrides: :class:`~benchmarks.qk_geometry.config.StudyConfig` fields (``depths``,
            ``inits``, ``seeds``, ``steps``, ``n_embd``...); :obj:`None` values are ignored.

    Returns:
        dict: ``trajectories``, ``intervention``, ``overhead``, ``hf`` (each a summary or
        :obj:`None`), ``markdown`` (the report) and ``summary`` (the findings, one line each).
    """
    cfg = configure(QUICK if quick else FULL, overrides)
    parts = list(parts)
    if hf_models:
        parts = list(dict.fromkeys(parts + ["hf"]))
    bad = [p for p in parts if p not in PARTS]
    if bad:
        raise ValueError(f"qk_geometry.run: unknown parts {bad}")
    if "hf" in parts and not hf_models:
        raise ValueError("qk_geometry.run: part 'hf' needs hf_models (checkpoint folders)")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    run_root = out / f"{name}_runs" / cfg.run_tag()
    meta = study_meta(cfg, quick, device)
    meta["corpus"] = meta.pop("corpus")  # last, as in the results written before
    md = [f"## Query/key geometry study ({'quick' if quick else 'full'} configuration)\n"]
    traj = inter = over = hf = None
    if "trajectories" in parts:
        traj, pieces = write_trajectories(cfg, run_root, out, name, meta, device, progress)
        write_run_bootstrap(read_records(records_path(out, name)), out, name, meta)
        md += pieces
    if "intervention" in parts:
        inter, pieces = _intervention_part(cfg, run_root, out, name, meta, device, progress)
        md += pieces
    if "overhead" in parts:
        over, pieces = _overhead_part(cfg, run_root, out, name, meta, device, progress)
        md += pieces
    if "hf" in parts:
        hf, pieces = _hf_part(cfg, hf_models, hf_byte_fallback, out, name, device, progress)
        md += pieces
    summary = report.findings(traj, inter, smoke=quick)
    if over is not None:
        summary.append(report.overhead_finding(over))
    markdown = pipeline_report.assemble(md, summary, report.config_notes(cfg, quick))
    if {"trajectories", "intervention", "overhead"} & set(parts):
        atomic_write_text(out / f"{name}.md", markdown)
    return {"config": cfg, "trajectories": traj, "intervention": inter, "overhead": over, "hf": hf,
            "markdown": markdown, "summary": summary, "run_root": run_root}


def write_run_bootstrap(records: Sequence[Mapping[str, Any]], out: Union[str, os.PathLike],
                        name: str, meta: Optional[Mapping[str, Any]] = None,
                        n_boot: int = 2000, seed: int = 0) -> dict[str, Any]:
    """Write ``<name>_share_bootstrap.{csv,json,md}``: the share of trajectories with
    PR_Q - PR_K > 0 at each step and at every later step, with percentile bootstrap intervals
    over runs (:func:`~benchmarks.qk_geometry.summary.run_bootstrap_shares`).

    Returns:
        dict: ``rows`` and ``paths``.
    """
    rows = run_bootstrap_shares(records, n_boot=n_boot, seed=seed)
    paths = write_results(f"{name}_share_bootstrap", rows, Path(out),
                          meta={**dict(meta or {}), "n_boot": n_boot, "bootstrap_seed": seed},
                          columns=RUN_BOOTSTRAP_COLUMNS, title=report.RUN_BOOTSTRAP_TITLE,
                          notes=report.RUN_BOOTSTRAP_NOTES)
    return {"rows": rows, "paths": paths}


def _intervention_part(cfg: StudyConfig, run_root: Path, out: Path, name: str,
                       meta: dict[str, Any], device: str, progress: bool
                       ) -> tuple[dict[str, Any], list[str]]:
    """Train the control modes over seeds, summarise and write them."""
    inter_results = run_intervention(cfg, run_root, device, progress)
    inter = intervention_summary(inter_results)
    p1 = write_results(f"{name}_intervention", inter["rows"], out, meta=meta,
                       columns=INTERVENTION_COLUMNS,
                       title=f"Key-spectrum control at depth {cfg.intervention_depth} "
                             f"({cfg.intervention_init} init), end of training",
                       notes=report.INTER_NOTES.format(decay=cfg.shrink_decay))
    tests = [{k: (str(v) if isinstance(v, list) else v) for k, v in t.items()}
             for t in inter["tests"]]
    p2 = write_results(f"{name}_intervention_tests", tests, out, meta=meta,
                       columns=INTERVENTION_TEST_COLUMNS,
                       title="Directional probability across seeds (one-sided sign test)")
    write_results(f"{name}_intervention_seeds", inter["per_seed"], out, meta=meta,
                  columns=INTERVENTION_SEED_COLUMNS, title="Intervention: per-seed end values")
    plot_intervention(inter_results, out / f"{name}_intervention.png")
    return inter, [p1["md"].read_text(), "\n", p2["md"].read_text(),
                   "\n", markdown_table(inter["per_seed"]),
                   f"\n![intervention]({name}_intervention.png)\n"]


def _overhead_part(cfg: StudyConfig, run_root: Path, out: Path, name: str, meta: dict[str, Any],
                   device: str, progress: bool) -> tuple[dict[str, Any], list[str]]:
    """Measure (or reload) the probing overhead and write its table."""
    over = measure_overhead(cfg, device, progress, cache=run_root / "overhead.json")
    row = {k: v for k, v in over.items() if not k.startswith(("times_", "walls_"))}
    p = write_results(f"{name}_overhead", [row], out,
                      meta={**meta, **{k: v for k, v in over.items() if k.startswith(("times_",
                                                                                      "walls_"))}},
                      title="Training-time overhead of probing (target < 10%)",
                      notes=report.OVERHEAD_NOTES)
    return over, [p["md"].read_text()]


def _hf_part(cfg: StudyConfig, hf_models: Sequence[Union[str, os.PathLike]],
             hf_byte_fallback: bool, out: Path, name: str, device: str, progress: bool
             ) -> tuple[dict[str, Any], list[str]]:
    """Probe the pretrained checkpoints and write their tables and figure."""
    hf = hf_analysis(hf_models, byte_fallback=hf_byte_fallback, corpus=cfg.corpus,
                     progress=progress, device=device)
    p = write_results(f"{name}_hf", hf["rows"], out, meta={"device": str(device)},
                      columns=HF_COLUMNS,
                      title="Pretrained checkpoints: per-layer query/key geometry")
    p2 = write_results(f"{name}_hf_pivot", hf["pivot"], out, meta={"device": str(device)},
                       title="PR_Q - PR_K per layer (rows) against training step (columns)")
    plot_hf(hf, out / f"{name}_hf.png")
    return hf, [p2["md"].read_text(), "\n", p["md"].read_text(), "\n",
                markdown_table(hf["correlations"]), f"\n![hf]({name}_hf.png)\n"]


def run_bootstrap_from_records(name: str,
                               out: Union[str, os.PathLike] = "benchmarks/qk_geometry/results",
                               n_boot: int = 2000, seed: int = 0) -> dict[str, Any]:
    """:func:`write_run_bootstrap` from a finished
    study's ``<out>/<name>_records.jsonl.gz`` (:func:`~benchmarks.qk_geometry.records.read_records`;
    trains nothing),
    with the metadata of its trajectory table."""
    out = Path(out)
    records = read_records(records_path(out, name))
    records = [r for r in records if r.get("kind", "probe") == "probe"]
    meta_file = out / f"{name}_trajectories.json"
    meta = json.loads(meta_file.read_text()).get("meta", {}) if meta_file.is_file() else {}
    return write_run_bootstrap(records, out, name, meta, n_boot=n_boot, seed=seed)


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    """Command-line entry of ``python -m benchmarks.qk_geometry.study``."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small CPU configuration (~10 min)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default="benchmarks/qk_geometry/results")
    parser.add_argument("--parts", nargs="+", default=None,
                        choices=["trajectories", "intervention", "overhead", "hf"],
                        help="which parts to run (default: trajectories intervention overhead; "
                             "only hf when --hf-model is given)")
    parser.add_argument("--hf-model", nargs="+", default=None, metavar="PATH",
                        help="local Hugging Face checkpoint folders (e.g. Pythia revisions)")
    parser.add_argument("--hf-byte-fallback", action="store_true",
                        help="probe folders without a tokenizer on UTF-8 byte ids (pipeline test "
                             "only)")
    parser.add_argument("--depths", type=int, nargs="+", default=None)
    parser.add_argument("--inits", nargs="+", default=None)
    parser.add_argument("--seeds", type=int, nargs="+", default=None)
    parser.add_argument("--intervention-seeds", type=int, nargs="+", default=None)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--n-embd", type=int, default=None)
    parser.add_argument("--n-head", type=int, default=None)
    parser.add_argument("--block-size", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--probe-every", type=int, default=None)
    parser.add_argument("--corpus", default=None,
                        help="CharCorpus source (file or WikiText-103 dir)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads (1 is fastest for these tiny models on shared "
                             "cores)")
    parser.add_argument("--name", default="qk_geometry",
                        help="file stem of the results and of the run folder <out>/<name>_runs "
                             "(default: qk_geometry)")
    parser.add_argument("--compare", nargs="+", default=None, metavar="NAME",
                        help="compare finished studies by their --name (reads "
                             "<out>/<NAME>_records.jsonl.gz, "
                             "trains nothing) and write <out>/qk_geometry_compare.*")
    parser.add_argument("--run-bootstrap", default=None, metavar="NAME",
                        help="train nothing: write <out>/<NAME>_share_bootstrap.* (shares with "
                             "intervals over runs) from <out>/<NAME>_records.jsonl.gz")
    parser.add_argument("--labels", nargs="+", default=None, help="legend labels for --compare")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    if args.run_bootstrap:
        res = run_bootstrap_from_records(args.run_bootstrap, args.out)
        print(res["paths"]["md"].read_text())
        return res
    if args.compare:
        from benchmarks.qk_geometry.compare import compare_studies

        res = compare_studies(args.compare, args.out, labels=args.labels)
        print(res["markdown"])
        return res
    if args.threads:
        torch.set_num_threads(args.threads)
    parts = args.parts or (["hf"] if args.hf_model else ["trajectories", "intervention",
                                                         "overhead"])
    result = run(quick=args.quick, device=args.device, out_dir=args.out,
                 progress=not args.no_progress,
                 parts=parts, hf_models=args.hf_model, hf_byte_fallback=args.hf_byte_fallback,
                 name=args.name,
                 depths=tuple(args.depths) if args.depths else None,
                 inits=tuple(args.inits) if args.inits else None,
                 seeds=tuple(args.seeds) if args.seeds else None,
                 intervention_seeds=tuple(args.intervention_seeds) if args.intervention_seeds
                 else None,
                 steps=args.steps, n_embd=args.n_embd, n_head=args.n_head,
                 block_size=args.block_size,
                 batch_size=args.batch_size, probe_every=args.probe_every, corpus=args.corpus)
    print(result["markdown"])
    return result


if __name__ == "__main__":
    main()
