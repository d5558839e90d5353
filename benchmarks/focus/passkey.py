r"""Passkey retrieval of SmolLM2-135M at 2K, 4K and 8K tokens (issue 31, section 4), for full
attention or any row of the Focus operating-point study.

A random 5-digit key is hidden at depths 0-100% of real prose (the filler: the token stream of
the language reference's test topics, :func:`~quest_geometric.datasets.pydoc_topic_splits`),
and the model's greedy answer to "What is the pass key? The pass key is" is scored by exact
match (:mod:`quest_geometric.datasets.passkey`, :mod:`quest_geometric.analysis.retrieval`).
Accuracy per length and per depth with 95% exact binomial intervals, and every configuration
against full attention on the same trials (:func:`paired_with_full`, exact McNemar test).

``--config NAME`` runs row ``NAME`` of :mod:`~benchmarks.focus.operating_point`
(``full``, a trained ``NAME`` or ``NAME@topK``, either with ``+sinks``, a ``random`` row, or
``sinks@NAME``), built by
:func:`~benchmarks.focus.operating_point.build_model`. ``sinks@NAME`` is
matched at each prompt length :math:`L` (the share row ``NAME`` keeps at :math:`L`, its
measured share extrapolated to :math:`L`), so its window differs from length to length and its
model is built once per length; the pattern each row ran with is stored in the row
(``pattern``). Every configuration appends to the same rows file, each row keyed by its
configuration name, and the summary table has one row per (configuration, length).

Every scored trial is appended to a JSON-lines file as soon as it finishes; a rerun with the
same file skips the trials it holds (same configuration, length, depth, trial and seed), so a
long run can be stopped and resumed. The summary tables are rebuilt from all rows of the file.

The 8K length is 8,186 tokens by default: the prompt plus the 6 generated tokens stay within
SmolLM2's 8,192 positions.

    python -m benchmarks.focus.passkey [--config NAME] [--quick] [--lengths 2048 4096]
                                       [--trials-per-depth 10]
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any, Optional, Sequence

import torch

from quest_geometric.analysis.retrieval import passkey_accuracy, score_passkey
from quest_geometric.datasets.passkey import passkey_trials
from quest_geometric.datasets.pydoc_text import pydoc_text, pydoc_topic_splits
from quest_geometric.profile import write_results
from benchmarks.focus.operating_point import RESULTS, build_model, resolve_config

__all__ = ["DEFAULT_LENGTHS", "DEFAULT_DEPTHS", "filler_tokens", "run", "summarize",
           "accuracy_by_config", "paired_with_full", "main"]

#: Prompt lengths: 2K, 4K and 8K less the 6 generated tokens.
DEFAULT_LENGTHS = (2048, 4096, 8186)
#: Needle depths.
DEFAULT_DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)


def filler_tokens(tokenizer: Any, source: str = "pydoc-test", every: int = 4) -> list[int]:
    r"""The filler token stream: ``'pydoc-test'``, the test topics of
    :func:`~quest_geometric.datasets.pydoc_topic_splits` joined and tokenized once.

    Args:
        tokenizer: the model's tokenizer.
        source (str): the filler (default: :obj:`'pydoc-test'`).
        every (int): the topic split's period (default: :obj:`4`).

    Returns:
        list[int]: token ids.
    """
    if source != "pydoc-test":
        raise ValueError(f"filler_tokens: 'source' must be 'pydoc-test', got {source!r}")
    _, _, test = pydoc_topic_splits(every)
    return list(tokenizer.encode(pydoc_text(test), add_special_tokens=False))


def _done_keys(path: Path) -> dict[tuple, dict]:
    done = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                done[(r["config"], r["length"], float(r["depth"]), r["trial"], r["seed"])] = r
    return done


def run(model: Any, tokenizer: Any, lengths: Sequence[int] = DEFAULT_LENGTHS,
        depths: Sequence[float] = DEFAULT_DEPTHS, trials_per_depth: int = 10, seed: int = 0,
        config: str = "full", jsonl: Optional[str] = None, max_new_tokens: int = 6,
        log: bool = True, pattern: Optional[dict] = None) -> tuple[list[dict], list[dict]]:
    r"""Score the passkey trials of every length; resumable through ``jsonl``.

    Args:
        model: a causal LM (full attention or Focus-composed).
        tokenizer: its tokenizer.
        lengths (Sequence[int]): prompt lengths in tokens.
        depths (Sequence[float]): needle depths in :math:`[0, 1]`.
        trials_per_depth (int): trials per (length, depth) (default: :obj:`10`).
        seed (int): the trials' seed (default: :obj:`0`).
        config (str): a label of the model's configuration, part of each row's identity
            (default: :obj:`'full'`).
        jsonl (str, optional): file the rows are appended to and resumed from.
        max_new_tokens (int): tokens generated per answer (default: :obj:`6`).
        log (bool): print each row (default: :obj:`True`).
        pattern (dict, optional): the configuration's resolved pattern, stored in each new
            row as ``pattern`` (e.g. the window of ``sinks@NAME`` at this length).

    The trials run trial-major (trial 0 at every depth, then trial 1, ...), so a run stopped
    early has covered every depth.

    Raises:
        ValueError: if a length plus ``max_new_tokens`` exceeds the model's positions
            (``model.config.max_position_embeddings``, where the model has one): SmolLM2's
            8K prompt is 8,186 tokens, not 8,192.

    Returns:
        ``(rows, summary)``: every row of this configuration and seed (resumed ones included)
        and :func:`~quest_geometric.analysis.passkey_accuracy` of them.
    """
    limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    too_long = [n for n in lengths if limit is not None and n + max_new_tokens > limit]
    if too_long:
        raise ValueError(
            f"focus_passkey.run: 'lengths' {too_long} plus the {max_new_tokens} generated tokens "
            f"exceed the model's {limit} positions (config.max_position_embeddings); the "
            f"longest prompt is {limit - max_new_tokens}")
    filler = filler_tokens(tokenizer)
    path = Path(jsonl) if jsonl else None
    done = _done_keys(path) if path else {}
    rows = []

    def ident(length, depth, trial):
        return (config, length, float(depth), trial, seed)

    def on_row(r):
        r.update(config=config, seed=seed, threads=torch.get_num_threads(),
                 loadavg=os.getloadavg()[0])
        if pattern is not None:
            r["pattern"] = pattern
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a") as f:
                f.write(json.dumps(r) + "\n")
        if log:
            print(f"[passkey] {config} L={r['length']} depth={r['depth']} trial={r['trial']} "
                  f"key={r['key']} answer={r['answer']!r} correct={r['correct']} "
                  f"{r['seconds']:.1f}s", flush=True)

    for length in lengths:
        prompts = passkey_trials(tokenizer, filler, length, depths, trials_per_depth, seed)
        prompts.sort(key=lambda p: p.trial)  # stable: trial-major, so a partial run spans depths
        rows += [done[ident(p.length, p.depth, p.trial)] for p in prompts
                 if ident(p.length, p.depth, p.trial) in done]
        rows += score_passkey(model, tokenizer, prompts, max_new_tokens, on_row=on_row,
                              skip=lambda p: ident(p.length, p.depth, p.trial) in done)
    return rows, passkey_accuracy(rows)


def summarize(jsonl: str, config: Optional[str] = None, seed: int = 0
              ) -> tuple[list[dict], list[dict]]:
    """Rows of ``config`` (every configuration for :obj:`None`) and ``seed`` in ``jsonl`` and
    their table :func:`accuracy_by_config` (one row per configuration and length; no model
    run)."""
    rows = [r for r in _done_keys(Path(jsonl)).values()
            if (config is None or r["config"] == config) and r["seed"] == seed]
    return rows, accuracy_by_config(rows)


def accuracy_by_config(rows: Sequence[dict], by_depth: bool = False,
                       level: float = 0.95) -> list[dict]:
    r"""Passkey accuracy of each configuration: :func:`~quest_geometric.analysis.passkey_accuracy`
    of the rows of each ``config``, with the exact binomial interval.

    Args:
        rows (Sequence[dict]): scored rows (``config``, ``length``, ``depth``, ``correct``).
        by_depth (bool): one row per (configuration, length, depth) instead of one per
            (configuration, length) (default: :obj:`False`).
        level (float): the interval's confidence level (default: :obj:`0.95`).

    Returns:
        list[dict]: ``config`` followed by :func:`passkey_accuracy`'s columns, sorted by
        configuration (``'full'`` first), then length (and depth).
    """
    configs = sorted({r["config"] for r in rows}, key=lambda c: (c != "full", c))
    out = []
    for c in configs:
        acc = passkey_accuracy([r for r in rows if r["config"] == c], level)
        out += [{"config": c, **a} for a in acc if (a["depth"] != "all") == by_depth]
    return out


def paired_with_full(rows: Sequence[dict], reference: str = "full") -> list[dict]:
    r"""Each configuration against ``reference`` on the *same* trials (same length, depth,
    trial and seed, hence the same key, filler and needle position): the counts of trials
    both answer, only the reference answers (``lost``), only the configuration answers
    (``gained``) and neither, the accuracy difference over the matched trials, and the exact
    McNemar test, the two-sided binomial test of the discordant trials,
    :math:`\mathrm{lost} \sim \mathrm{Bin}(\mathrm{lost} + \mathrm{gained}, 1/2)`
    (:func:`~quest_geometric.analysis.stats.sign_test`; 1 when no trial is discordant).

    Returns:
        list[dict]: one row per (configuration, length) with matched trials, sorted by
        configuration then length.
    """
    from quest_geometric.analysis.stats import sign_test

    key = lambda r: (r["length"], float(r["depth"]), r["trial"], r["seed"])  # noqa: E731
    ref = {key(r): bool(r["correct"]) for r in rows if r["config"] == reference}
    out = []
    for c in sorted({r["config"] for r in rows} - {reference}):
        mine = {key(r): bool(r["correct"]) for r in rows if r["config"] == c}
        for length in sorted({k[0] for k in mine}):
            both = [(ref[k], v) for k, v in mine.items() if k[0] == length and k in ref]
            if not both:
                continue
            lost = sum(a and not b for a, b in both)
            gained = sum(b and not a for a, b in both)
            n = len(both)
            out.append({"config": c, "length": length, "matched": n,
                        "both": sum(a and b for a, b in both), "lost": lost,
                        "gained": gained, "neither": sum(not a and not b for a, b in both),
                        "diff": (gained - lost) / n,
                        "mcnemar_p": sign_test(lost, gained)})
    return out


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Command line of ``python -m benchmarks.focus.passkey`` (``--help`` lists the options)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="full",
                    help="row of the operating-point study: full, NAME, NAME@topK, "
                         "NAME+sinks or sinks@NAME (default: full)")
    ap.add_argument("--results", default=str(RESULTS),
                    help="folder of the trained routers (routers_NAME) and evaluated rows "
                         "(NAME.json, for sinks@NAME)")
    ap.add_argument("--quick", action="store_true",
                    help="2,048 tokens only, one trial per depth")
    ap.add_argument("--lengths", type=int, nargs="+", default=list(DEFAULT_LENGTHS))
    ap.add_argument("--depths", type=float, nargs="+", default=list(DEFAULT_DEPTHS))
    ap.add_argument("--trials-per-depth", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--jsonl", default=None,
                    help="rows file to append to and resume from "
                         "(default: <out>/<name>_trials.jsonl)")
    ap.add_argument("--out", default="benchmarks/focus/results")
    ap.add_argument("--name", default=None, help="file stem (default: focus_passkey[_quick])")
    ap.add_argument("--summarize-only", action="store_true",
                    help="rebuild the tables from the rows file without running the model")
    args = ap.parse_args(argv)
    if args.quick:
        args.lengths, args.trials_per_depth = [2048], 1
    if args.threads:
        torch.set_num_threads(args.threads)
    name = args.name or ("focus_passkey_quick" if args.quick else "focus_passkey")
    jsonl = args.jsonl or os.path.join(args.out, f"{name}_trials.jsonl")
    load0 = os.getloadavg()
    t0 = time.time()
    if args.summarize_only:
        rows, summary = summarize(jsonl, seed=args.seed)
    else:
        per_length = args.config.startswith("sinks@")  # its window is matched at each length
        resolve_config(args.config, args.results)  # a bad name fails before any model loads
        model = tokenizer = None
        for length in args.lengths:
            at = length if per_length else None
            if model is None or per_length:
                model = None
                model, tokenizer = build_model(args.config, args.results, length=at)
            run(model, tokenizer, [length], args.depths, args.trials_per_depth, args.seed,
                config=args.config, jsonl=jsonl,
                pattern=resolve_config(args.config, args.results, length=at))
        rows, summary = summarize(jsonl, seed=args.seed)
    secs = [r["seconds"] for r in rows]
    patterns = {f"{r['config']} L={r['length']}": r.get("pattern", {"kind": "full"})
                for r in rows}
    meta = {"model": "SmolLM2-135M-Instruct (Q4_1, dequantised to float32)",
            "configs": sorted({r["config"] for r in rows}), "patterns": patterns,
            "by_depth": accuracy_by_config(rows, by_depth=True),
            "seed": args.seed, "lengths": args.lengths,
            "depths": args.depths, "trials_per_depth": args.trials_per_depth,
            "filler": "pydoc test topics (pydoc_topic_splits(4))", "max_new_tokens": 6,
            "interval": "exact (Clopper-Pearson) 95%", "rows_file": jsonl,
            "rows": len(rows), "threads_used": sorted({r.get("threads") for r in rows}),
            "loadavg_start": load0, "loadavg_end": os.getloadavg(),
            "seconds_per_trial_median": sorted(secs)[len(secs) // 2] if secs else None,
            "wall_seconds": time.time() - t0}
    lengths_run = sorted({r["length"] for r in rows})
    notes = (f"Exact match of the greedy 6-token answer; {len(rows)} trials at lengths "
             f"{lengths_run}, all depths together (per depth: `by_depth` in the JSON file); "
             f"`ci_low`/`ci_high`: exact 95% interval. Configurations are the rows of the "
             f"operating-point study (sinks@NAME matched at each length; `patterns` in the "
             f"JSON file). Rows per trial: {jsonl}.")
    for r in meta["by_depth"]:
        r["depth"] = str(r["depth"])
    write_results(name, summary, args.out, meta,
                  columns=["config", "length", "n", "correct", "accuracy", "ci_low", "ci_high"],
                  title="Passkey retrieval, SmolLM2-135M, per configuration", notes=notes)
    paired = paired_with_full(rows)
    if paired:
        write_results(f"{name}_paired", paired, args.out, {"rows_file": jsonl,
                                                             "seed": args.seed},
                      title="Passkey retrieval against full attention on the same trials",
                      notes="Trials matched by length, depth, trial and seed (same key, "
                            "filler and position). `lost`: full attention right, the "
                            "configuration wrong; `gained`: the reverse; `diff`: the "
                            "configuration's accuracy minus full attention's on the matched "
                            "trials; `mcnemar_p`: exact two-sided McNemar test of the "
                            "discordant trials (`paired_with_full`).")


if __name__ == "__main__":
    from benchmarks._entry import require_smollm2

    require_smollm2()
    main()
