r"""Probing a series of local Hugging Face checkpoints (e.g. Pythia revisions) with
:class:`~quest_geometric.analysis.probe.QKProbe`: :func:`hf_analysis` follows the per-layer
:math:`\mathrm{PR}_Q - \mathrm{PR}_K` over training steps (the ``'hf'`` part of
``python -m benchmarks.qk_geometry.study --hf-model PATH ...``)."""
from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np
import torch
from tqdm.auto import tqdm

from quest_geometric.analysis.probe import probe_model
from quest_geometric.analysis.stats import spearman as stats_spearman
from benchmarks.qk_geometry.trajectories.config import METRIC_KEYS

__all__ = ["hf_analysis"]

_STEP_RE = re.compile(r"step[-_]?(\d+)", re.IGNORECASE)
_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json",
                 "pytorch_model.bin.index.json")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")


def _checkpoint_step(path: Path, config: Any, position: int) -> tuple[int, str]:
    """The training step of a checkpoint: from the folder name (``step143000``,
    ``pythia-70m-step1000``), else from a ``step`` entry of its config, else its position."""
    for part in reversed(path.resolve().parts):
        m = _STEP_RE.search(part)
        if m:
            return int(m.group(1)), "folder name"
    for key in ("step", "training_step", "global_step"):
        v = getattr(config, key, None)
        if isinstance(v, int) and not isinstance(v, bool):
            return v, f"config.{key}"
    return position, "order given"


def _check_hf_dir(path: Union[str, os.PathLike]) -> Path:
    p = Path(path)
    if not p.is_dir():
        raise ValueError(f"hf_analysis: {os.fspath(path)!r} is not a directory holding a Hugging "
                         "Face model (expected a folder written by save_pretrained with "
                         "config.json and model.safetensors or pytorch_model.bin)")
    if not (p / "config.json").is_file():
        raise ValueError(f"hf_analysis: {os.fspath(path)!r} does not hold a Hugging Face model: no "
                         "config.json (a folder written by save_pretrained is expected)")
    if not any((p / f).is_file() for f in _WEIGHT_FILES):
        raise ValueError(f"hf_analysis: {os.fspath(path)!r} has a config.json but no weights "
                         f"(none of {list(_WEIGHT_FILES)}); it does not hold a model")
    return p


def hf_analysis(paths: Sequence[Union[str, os.PathLike]], text: Optional[str] = None,
                seq_len: int = 128, batch_size: int = 8, byte_fallback: bool = False,
                corpus: str = "python-reference", progress: bool = False,
                device: str = "cpu") -> dict[str, Any]:
    r"""Probe local Hugging Face causal LMs (e.g. a series of Pythia revisions).

    Each folder (written by ``save_pretrained``; any model whose attention :class:`QKProbe`
    knows) is probed on the first ``batch_size * seq_len`` tokens of the text, tokenised by
    its own tokenizer. Checkpoints are ordered by training step, parsed from the folder name
    (``step1000``), else from a ``step`` entry of the config, else the order given.

    Args:
        paths (sequence of path): checkpoint folders.
        text (str, optional): the text to probe on; :obj:`None` uses the validation split
            of ``corpus``. (default: :obj:`None`)
        seq_len (int): tokens per sequence (capped at the model's context). (default: ``128``)
        batch_size (int): sequences. (default: ``8``)
        byte_fallback (bool): for a folder without a tokenizer, use the UTF-8 bytes of the
            text as token ids (needs ``vocab_size >= 256``; meaningful only for testing the
            pipeline, since the model was not trained on these ids). Without it a folder
            without tokenizer is an error. (default: :obj:`False`)
        corpus (str): CharCorpus source for the default text. (default: ``'python-reference'``)
        progress (bool): progress bar. (default: :obj:`False`)
        device (str): where to run the models. (default: ``'cpu'``)

    Returns:
        dict: ``rows`` (one per checkpoint and layer: ``checkpoint``, ``step``, ``layer``,
        ``pr_q``, ``pr_k``, ``pr_q_minus_pr_k``, ``qk_effective_rank``,
        ``attention_entropy``...), ``pivot`` (PR_Q - PR_K per layer with one column per
        step) and ``correlations`` (per checkpoint, Spearman of the QK^T effective rank
        with the entropy over layers and heads).
    """
    try:
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:  # pragma: no cover - optional dependency
        raise ImportError("hf_analysis needs the 'transformers' package (pip install "
                          "transformers)") from e
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if not paths:
        raise ValueError("hf_analysis: no checkpoint path given")
    dirs = [_check_hf_dir(p) for p in paths]
    if text is None:
        from quest_geometric.datasets.char_corpus import CharCorpus

        c = CharCorpus(corpus, block_size=8)
        text = c.decode(c.splits["val"].long())
    entries = sorted(((*_checkpoint_step(d, AutoConfig.from_pretrained(d), pos), pos, d)
                      for pos, d in enumerate(dirs)), key=lambda e: (e[0], e[2]))
    rows, corr = [], []
    for step, source, _, d in tqdm(entries, desc="checkpoints", disable=not progress):
        has_tok = any((d / f).is_file() for f in _TOKENIZER_FILES)
        model = AutoModelForCausalLM.from_pretrained(d).to(device)
        vocab = int(model.config.vocab_size)
        ctx = getattr(model.config, "n_positions", None) or getattr(model.config,
                                                                    "max_position_embeddings", None)
        T = min(seq_len, int(ctx)) if ctx else seq_len
        # subword tokens average a few characters (GPT-2: ~4 on English): 16 characters per
        # needed token is ample, and the whole corpus need not be tokenised
        snippet = text[:16 * batch_size * T]
        if has_tok:
            tok = AutoTokenizer.from_pretrained(d)
            ids = tok(snippet, add_special_tokens=False)["input_ids"]
            tokenizer_name = type(tok).__name__
        elif byte_fallback:
            if vocab < 256:
                raise ValueError(f"hf_analysis: the byte-level fallback needs vocab_size >= 256, "
                                 f"the model has {vocab}")
            ids = list(snippet.encode("utf-8"))
            tokenizer_name = "utf-8 bytes (fallback)"
        else:
            raise ValueError(f"hf_analysis: {os.fspath(d)!r} holds no tokenizer (none of "
                             f"{list(_TOKENIZER_FILES)}); save it beside the model "
                             "(tokenizer.save_pretrained(path)) or pass byte_fallback=True "
                             "(--hf-byte-fallback) to probe on UTF-8 byte ids")
        need = batch_size * T
        if len(ids) < 2 * batch_size:
            raise ValueError(f"hf_analysis: the text gives only {len(ids)} tokens; need at least "
                             f"{2 * batch_size}")
        if len(ids) < need:
            T = len(ids) // batch_size
        if max(ids[:batch_size * T]) >= vocab:
            raise ValueError(f"hf_analysis: token ids reach {max(ids)}, beyond the model's "
                             f"vocab_size {vocab}")
        x = torch.tensor(ids[:batch_size * T], dtype=torch.long, device=device).view(batch_size, T)
        layers, heads, _ = probe_model(model, {"input_ids": x, "use_cache": False},
                                       max_tokens=batch_size * T)
        for rec in layers:
            rows.append({"checkpoint": d.name, "path": os.fspath(d), "step": step,
                         "step_from": source,
                         "tokenizer": tokenizer_name, "layer": rec["layer_index"],
                         **{k: rec.get(k) for k in METRIC_KEYS}})
        rho, p, n = stats_spearman([h["qk_effective_rank"] for h in heads], [h["attention_entropy"]
                                                                             for h in heads])
        corr.append({"checkpoint": d.name, "step": step, "x": "qk_effective_rank",
                     "y": "attention_entropy", "over": "layers x heads", "spearman_rho": rho,
                     "p_value": p, "n": n})
        del model
    steps = sorted({r["step"] for r in rows})
    pivot = []
    for layer in sorted({r["layer"] for r in rows}):
        prow: dict[str, Any] = {"layer": layer}
        for s in steps:
            vals = [r["pr_q_minus_pr_k"] for r in rows if r["layer"] == layer and r["step"] == s
                    and r["pr_q_minus_pr_k"] is not None]
            prow[f"step {s}"] = float(np.mean(vals)) if vals else math.nan
        pivot.append(prow)
    return {"rows": rows, "pivot": pivot, "steps": steps, "correlations": corr}
