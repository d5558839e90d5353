"""Command-line entry of ``python -m benchmarks.qk_geometry.study``, with the run bootstrap
of a finished study's records (:func:`run_bootstrap_from_records`)."""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any, Optional, Union

import torch

from benchmarks.qk_geometry.records import read_records
from quest_geometric.pipelines.qk_geometry.records import records_path
from quest_geometric.pipelines.qk_geometry.study import run, write_run_bootstrap


def run_bootstrap_from_records(name: str,
                               out: Union[str, os.PathLike] = "benchmarks/qk_geometry/results",
                               n_boot: int = 2000, seed: int = 0) -> dict[str, Any]:
    """:func:`~quest_geometric.pipelines.qk_geometry.study.write_run_bootstrap` from a finished
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
    from quest_geometric.pipelines import qk_geometry

    parser = argparse.ArgumentParser(description=qk_geometry.__doc__,
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
