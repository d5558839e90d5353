"""Decoding speed: greedy cached decoding with full attention against Focus hard top-1 and
top-2, timed in alternation."""
from __future__ import annotations

import contextlib
import random
import statistics
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import torch

from quest_geometric.profile import ratio_summary
from benchmarks.focus.pretrained.bounds import write_decode_bounds
from benchmarks.focus.pretrained.config import load_average
from benchmarks.focus.pretrained.report import SPEED_TITLE
from benchmarks.focus.pretrained.routers import load_router_weights


class _Decoder:
    """Greedy cached decoding of one prompt in one mode (Focus off, or hard top-:math:`k`),
    keeping its own cache so that modes can be timed in alternation."""

    def __init__(self, model: Any, prompt: torch.Tensor, top_k: Optional[int],
                 static_len: Optional[int] = None) -> None:
        self.model, self.top_k = model, top_k
        kw: Dict[str, Any] = {}
        if static_len is not None:  # a preallocated cache: no concatenation per step
            from transformers import StaticCache

            kw["cache"] = StaticCache(config=model.config, max_cache_len=static_len)
        with torch.no_grad(), self._mode():
            out = model(prompt, use_cache=True, **kw)
        self.cache = out.past_key_values
        self.nxt = out.logits[:, -1:].argmax(-1)

    def _mode(self):
        from quest_geometric.nn.focus import focus_disabled, set_focus_options

        if self.top_k is None:
            return focus_disabled(self.model)
        set_focus_options(self.model, top_k=self.top_k)
        return contextlib.nullcontext()

    def tokens_per_second(self, n: int) -> float:
        with torch.no_grad(), self._mode():
            t0 = time.perf_counter()
            for _ in range(n):
                out = self.model(self.nxt, cache=self.cache, use_cache=True)
                self.nxt = out.logits[:, -1:].argmax(-1)
            return n / (time.perf_counter() - t0)



def run_speed(contexts: Sequence[int] = (1024, 4096, 8000), new_tokens: int = 16,
              rounds: int = 3, window: int = 64, num_groups: int = 4,
              routers: Optional[str] = None, out_dir: str | Path = "benchmarks/focus/results",
              name: str = "focus_pretrained_speed", progress: bool = True,
              cache: str = "dynamic") -> Dict[str, Any]:
    """Greedy cached decoding, tokens per second after a prompt of each length, full
    attention against Focus hard top-1 and top-2 (the routers in ``routers``, a
    run folder of :func:`train_routers` or a committed
    :func:`~quest_geometric.nn.focus.save_routers` folder, see
    :func:`load_router_weights`; else fresh ones). Each mode prefills
    once (not timed) and keeps its own cache; the modes then decode ``new_tokens`` tokens
    for ``rounds`` rounds, each round in a seeded shuffled order, and the ratio against full
    attention is the true median of the per-round ratios (the mean of the two middle ones for
    an even count; :func:`~quest_geometric.profile.ratio_summary`), every round's
    ratio saved in the JSON's ``meta['round_ratios']``. ``cache='dynamic'`` is Hugging
    Face's default ``DynamicCache`` (keys and values concatenated at every step, a cost both
    modes pay);
    ``cache='static'`` a preallocated ``StaticCache`` (written in place; full attention
    then reads the whole buffer, Focus only the keys it selects); ``cache='both'`` times
    the six decoders (two caches x three modes) in alternation in one process, each row's
    ``vs_full`` against full attention with the same cache and ``vs_full_dynamic`` against
    full attention with the dynamic one (the peer a user of either cache would compare
    with)."""
    from quest_geometric.datasets import pydoc_topic_split, token_blocks
    from quest_geometric.profile import write_results
    from quest_geometric.models.smollm2 import load_smollm2
    from quest_geometric.nn.focus import compose_focus

    model, tok = load_smollm2()
    compose_focus(model, num_groups=num_groups, top_k=2, window=window, backend="blocks")
    if routers:
        load_router_weights(model, routers)
    model.eval()
    tr, va = pydoc_topic_split()
    stream = token_blocks(tok, sorted(tr + va), block_size=max(contexts))[0:1]
    caches = ("dynamic", "static") if cache == "both" else (cache,)
    if any(c not in ("dynamic", "static") for c in caches):
        raise ValueError(f"run_speed: cache must be 'dynamic', 'static' or 'both', got {cache!r}")
    rows = []
    round_ratios: Dict[str, List[float]] = {}  # every round's ratio, saved in the JSON
    modes = {"full": None, "top-1": 1, "top-2": 2}
    keys = [(c, m) for c in caches for m in modes]
    for ctx in contexts:
        cap = ctx + rounds * new_tokens + 1
        dec = {(c, m): _Decoder(model, stream[:, :ctx], modes[m], cap if c == "static" else None)
               for c, m in keys}
        times: Dict[Any, List[float]] = {key: [] for key in keys}
        order = random.Random(ctx)  # each round in its own seeded, shuffled order
        for _ in range(rounds):
            for key in order.sample(keys, len(keys)):
                times[key].append(dec[key].tokens_per_second(new_tokens))
        for c, m in keys:
            ratios = [a / b for a, b in zip(times[(c, m)], times[(c, "full")])]
            summary = ratio_summary(ratios)  # the true median, range and every round's ratio
            row = {"context": ctx, "mode": m,
                   "tok_per_s": statistics.median(times[(c, m)]),
                   "vs_full": summary["median"],
                   "min_ratio": summary["min"], "max_ratio": summary["max"]}
            round_ratios[f"{c} {ctx} {m}"] = summary["ratios"]
            if len(caches) > 1:
                base = [a / b for a, b in zip(times[(c, m)], times[(caches[0], "full")])]
                row = {"cache": c, **row, f"vs_full_{caches[0]}": statistics.median(base)}
            rows.append(row)
        del dec
        if progress:
            print(f"[speed] context {ctx}: " + ", ".join(
                f"{r.get('cache', cache)} {r['mode']} {r['tok_per_s']:.2f} tok/s "
                f"({r['vs_full']:.2f}x)" for r in rows[-len(keys):]), flush=True)
    meta = {"cache": cache, "new_tokens_per_round": new_tokens, "rounds": rounds,
            "window": window,
            "K": num_groups, "routers": routers or "fresh (untrained)",
            "load": load_average(),
            "order": "each round in a seeded shuffled order (random.Random(context))",
            "round_ratios": round_ratios}
    paths = write_results(name, rows, out_dir, meta=meta,
                          title=SPEED_TITLE)
    bounds = write_decode_bounds(paths["json"]) if len(contexts) > 1 else None
    return {"rows": rows, "paths": paths, "bounds": bounds}

