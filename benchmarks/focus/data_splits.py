r"""The text overlap of every data split of the Focus benchmarks, in SmolLM2 tokens (issue 31,
section 1).

For each held-out split: the share of its token positions inside a 32-token window that occurs
verbatim in the training tokens (:func:`~quest_geometric.datasets.overlap_share`), overall and
per 1,024-token block, for

- the old two-way topic split (:func:`~quest_geometric.datasets.pydoc_topic_split`), the one
  the Focus retrofit benchmark has used, its validation blocks as
  :func:`~quest_geometric.datasets.token_blocks` cuts them;
- the three-way split (:func:`~quest_geometric.datasets.pydoc_splits`): the raw validation
  and test streams, and the deduplicated blocks actually used;
- the out-of-domain prose (:func:`~benchmarks.focus.prose.ood_prose_blocks`) against the
  new training tokens, with the list of files read (path, SHA-256) in the JSON.

Needs only SmolLM2's tokenizer (no model forward).

    python -m benchmarks.focus.data_splits
"""
from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any, Optional

__all__ = ["run", "main"]


def _fmt(per: list[float]) -> str:
    return " ".join(f"{x:.2f}" for x in per)


def run(tokenizer: Any, block: int = 1024, n: int = 32, every: int = 4,
        roots: Optional[dict] = None) -> tuple[list[dict], dict]:
    r"""Measure every split's overlap.

    Args:
        tokenizer: the tokenizer the blocks are cut in (SmolLM2's in the benchmark).
        block (int): tokens per block (default: :obj:`1024`).
        n (int): the window length (default: :obj:`32`).
        every (int): the three-way split's period (default: :obj:`4`).
        roots (dict, optional): the out-of-domain sources' folders, as in
            :func:`~benchmarks.focus.prose.ood_prose_blocks` (default: the system's).

    Returns:
        ``(rows, extra)``: one table row per split and ``{'ood_files': ..., 'old_topics':
        ..., 'new_topics': ...}``.
    """
    from benchmarks.focus.prose import ood_prose_blocks
    from quest_geometric.datasets import (
        overlap_share,
        pydoc_splits,
        pydoc_text,
        pydoc_topic_split,
        token_blocks,
        window_set,
    )

    rows = []
    old_train, old_val = pydoc_topic_split()
    tr_ids = tokenizer.encode(pydoc_text(old_train), add_special_tokens=False)
    ws_old = window_set(tr_ids, n)
    val = token_blocks(tokenizer, old_val, block_size=block)
    for label, blocks in (("old split: validation, first 8 blocks", val[:8]),
                          ("old split: validation, all blocks", val)):
        r = overlap_share(blocks, ws_old, n)
        rows.append({"split": label, "documents": len(old_val), "train_documents": len(old_train),
                     "blocks": len(blocks), "overlap": round(r["share"], 4),
                     "per_block": _fmt(r["per_block"])})
    s = pydoc_splits(tokenizer, block_size=block, n=n, every=every)
    ws_new = window_set(tokenizer.encode(pydoc_text(s.report["topics"]["train"]),
                                         add_special_tokens=False), n)
    for part in ("val", "test"):
        rep = s.report[part]
        name = {"val": "validation", "test": "test"}[part]
        rows.append({"split": f"new split: {name}, plain blocks (not used)",
                     "documents": len(s.report["topics"][part]),
                     "train_documents": len(s.report["topics"]["train"]),
                     "blocks": len(rep["stream"]["per_block"]),
                     "overlap": round(rep["stream"]["share"], 4),
                     "per_block": _fmt(rep["stream"]["per_block"])})
        rows.append({"split": f"new split: {name}, deduplicated blocks",
                     "documents": len(s.report["topics"][part]),
                     "train_documents": len(s.report["topics"]["train"]),
                     "blocks": len(getattr(s, part)), "overlap": rep["blocks"]["share"],
                     "per_block": f"kept {rep['kept_share']:.1%} of the stream's tokens"})
    ood, record = ood_prose_blocks(tokenizer, block_len=block, roots=roots)
    for source in record["sources"]:
        idx = [i for i, b in enumerate(record["block_source"]) if b == source]
        r = overlap_share(ood[idx], ws_new, n)
        rows.append({"split": f"out of domain: {source}",
                     "documents": len(record["sources"][source]["files"]),
                     "train_documents": len(s.report["topics"]["train"]), "blocks": len(idx),
                     "overlap": round(r["share"], 4), "per_block": _fmt(r["per_block"])})
    extra = {"ood_files": record["sources"], "old_topics": {"train": old_train, "val": old_val},
             "new_topics": s.report["topics"], "train_blocks_new": len(s.train)}
    return rows, extra


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Command line of ``python -m benchmarks.focus.data_splits``."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="benchmarks/focus/results")
    ap.add_argument("--name", default="focus_data_splits")
    args = ap.parse_args(argv)
    from transformers import AutoTokenizer

    from quest_geometric.profile import write_results
    from quest_geometric.models.smollm2 import SMOLLM2_GGUF, smollm2_path

    t0 = time.time()
    tok = AutoTokenizer.from_pretrained(smollm2_path(), gguf_file=SMOLLM2_GGUF)
    rows, extra = run(tok)
    meta = {"tokenizer": "SmolLM2-135M-Instruct", "window": 32, "block": 1024,
            "overlap": "share of token positions inside a 32-token window that occurs verbatim "
                       "in the training tokens", "new_split_every": 4,
            "wall_seconds": round(time.time() - t0, 1), **extra}
    notes = ("documents: topics of the language reference, or files of the out-of-domain "
             "prose. Old split: pydoc_topic_split() (training = its 63 training topics). New "
             "split: "
             "pydoc_splits(every=4), held-out blocks cut from text sharing no 32-token window "
             "with the 40 training topics. Out of domain: ood_prose_blocks, measured against the "
             "new training tokens; the files read and their SHA-256 are in the JSON.")
    write_results(args.name, rows, args.out, meta,
                  columns=["split", "documents", "train_documents", "blocks", "overlap",
                           "per_block"],
                  title="Text overlap of the Focus data splits (SmolLM2 tokens, 32-token windows)",
                  notes=notes)


if __name__ == "__main__":
    from benchmarks._entry import require_smollm2

    require_smollm2()
    main()
