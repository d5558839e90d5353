r"""Scoring long-range retrieval: greedy answers to passkey prompts, exact match, and accuracy
with exact (Clopper-Pearson) intervals (:func:`~quest_geometric.analysis.binomial_interval`),
overall and per depth. A trial is correct when the first run of digits of the model's greedy
continuation is exactly the key (:func:`~quest_geometric.datasets.parse_passkey`).
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Optional

import torch
from torch import Tensor

from quest_geometric._utils.checks import check_int
from quest_geometric.analysis.stats import binomial_interval
from quest_geometric.datasets.passkey import parse_passkey

__all__ = ["greedy_continuation", "score_passkey", "passkey_accuracy"]


@torch.no_grad()
def greedy_continuation(model: Any, input_ids: Tensor, max_new_tokens: int = 6) -> list[int]:
    r"""The new token ids of the greedy continuation of one prompt: ``model.generate(...,
    do_sample=False)`` when the model has it (any Hugging Face causal LM), else repeated full
    forwards ``model(ids).logits`` (or a tensor of logits) and argmax.

    Args:
        model: a causal LM.
        input_ids (Tensor): ``[T]`` or ``[1, T]`` prompt ids.
        max_new_tokens (int): tokens to generate (default: :obj:`6`).
    """
    check_int(max_new_tokens, "'max_new_tokens'", 1, where="greedy_continuation")
    if not isinstance(input_ids, Tensor):
        raise TypeError("greedy_continuation: 'input_ids' must be a tensor, got "
                        f"{type(input_ids).__name__}")
    ids = input_ids.reshape(1, -1).long()
    gen = getattr(model, "generate", None)
    if gen is not None:
        kwargs = dict(max_new_tokens=max_new_tokens, do_sample=False,
                      attention_mask=torch.ones_like(ids))
        cfg = getattr(model, "generation_config", None)
        if cfg is not None:  # greedy: no sampling settings to warn about
            kwargs.update(temperature=None, top_p=None, top_k=None)
            eos = getattr(cfg, "eos_token_id", None)
            if getattr(cfg, "pad_token_id", None) is None and eos is not None:
                kwargs["pad_token_id"] = eos[0] if isinstance(eos, (list, tuple)) else eos
        out = gen(ids, **kwargs)
        out = out.sequences if hasattr(out, "sequences") else out
        return out[0, ids.shape[1]:].tolist()
    new = []
    for _ in range(max_new_tokens):
        out = model(ids)
        logits = out.logits if hasattr(out, "logits") else out
        nxt = int(logits[0, -1].argmax())
        new.append(nxt)
        ids = torch.cat([ids, ids.new_tensor([[nxt]])], dim=1)
    return new


def score_passkey(model: Any, tokenizer: Any, prompts: Iterable[Any], max_new_tokens: int = 6,
                  on_row: Optional[Callable[[dict], None]] = None,
                  skip: Optional[Callable[[Any], bool]] = None) -> list[dict]:
    r"""Answer every prompt greedily and score it by exact match.

    Args:
        model: a causal LM (see :func:`greedy_continuation`).
        tokenizer: has ``decode(ids) -> str``.
        prompts (Iterable): :class:`~quest_geometric.datasets.PasskeyPrompt` objects.
        max_new_tokens (int): tokens generated per answer (default: :obj:`6`).
        on_row (callable, optional): called with each row as soon as it is scored (e.g. to
            append it to a file, so an interrupted run can resume).
        skip (callable, optional): ``skip(prompt) -> bool``: prompts not to run.

    Returns:
        list[dict]: one row per prompt run: ``length``, ``depth``, ``actual_depth``,
        ``trial``, ``key``, ``answer`` (the decoded continuation), ``parsed``, ``correct``,
        ``needle_start``, ``filler_offset``, ``seconds``.
    """
    rows = []
    for p in prompts:
        if skip is not None and skip(p):
            continue
        t0 = time.perf_counter()
        new = greedy_continuation(model, p.input_ids, max_new_tokens)
        seconds = time.perf_counter() - t0
        answer = tokenizer.decode(new)
        parsed = parse_passkey(answer)
        row = {"length": p.length, "depth": p.depth, "actual_depth": p.actual_depth,
               "trial": p.trial, "key": p.key, "answer": answer, "parsed": parsed,
               "correct": parsed == p.key, "needle_start": p.needle_start,
               "filler_offset": p.filler_offset, "seconds": seconds}
        if on_row is not None:
            on_row(row)
        rows.append(row)
    return rows


def passkey_accuracy(rows: Sequence[dict], level: float = 0.95) -> list[dict]:
    r"""Accuracy per length (``depth`` = ``'all'``) and per (length, depth), with the exact
    binomial interval.

    Args:
        rows (Sequence[dict]): rows of :func:`score_passkey` (``length``, ``depth``,
            ``correct``).
        level (float): the interval's confidence level (default: :obj:`0.95`).

    Returns:
        list[dict]: sorted by length, the ``'all'`` row first, then depths ascending; each
        with ``length``, ``depth``, ``n``, ``correct``, ``accuracy``, ``ci_low``, ``ci_high``.
    """
    groups: dict[tuple, list[bool]] = {}
    for r in rows:
        groups.setdefault((r["length"], "all"), []).append(bool(r["correct"]))
        groups.setdefault((r["length"], float(r["depth"])), []).append(bool(r["correct"]))

    def order(k):
        return (k[0], -1.0 if k[1] == "all" else k[1])

    out = []
    for key in sorted(groups, key=order):
        v = groups[key]
        k, n = sum(v), len(v)
        lo, hi = binomial_interval(k, n, level)
        out.append({"length": key[0], "depth": key[1], "n": n, "correct": k,
                    "accuracy": k / n, "ci_low": lo, "ci_high": hi})
    return out
