"""One cached decoding step of a SmolLM2-sized Llama with Focus composed: full attention
against Focus hard top-1 and top-2, at several context lengths, both KV caches.

    python -m benchmarks.focus.decode_step [--quick] [--threads 1 2] [--contexts 1024 4096 8192]
                                           [--compare-paths]

The model has SmolLM2-135M's shape (30 layers, width 576, 9 query heads and 3 key/value
heads of size 64, MLP 1536, vocabulary 49,152, tied embeddings) with random weights, so no
download or model load is needed; decoding time does not depend on the weights' values. The
context is synthetic: each layer's cache is filled with random keys and values and its Focus
state with the routing of random hidden states (route_prefix, the same call a real prefill
makes), so a long context needs no prefill per mode. What is timed
is what the real benchmark times, ``model(token, cache=cache, use_cache=True)``, one step
per call: embedding, 30 layers, LM head; each mode keeps its own cache, the modes are timed
in alternation (round-robin), wall clock and process CPU time, and the ratio to full
attention is the median of the per-round ratios. ``dynamic`` is Hugging Face's
DynamicCache (keys and values concatenated at every step, a cost every mode pays),
``static`` a preallocated StaticCache.

The end-to-end measurement with the real model and trained routers is
``python -m benchmarks.focus.pretrained --speed --routers ...``. The command line is
``python -m benchmarks.focus.decode_step``, a thin wrapper around :func:`main`.
"""
from __future__ import annotations

import argparse
import math
import statistics
import time
from typing import Any, Dict, List, Optional

import torch

from quest_geometric.profile import time_interleaved, write_results
from quest_geometric.nn.focus import (
    FocusComposed,
    FocusDecodeState,
    compose_focus,
    focus_disabled,
    route_prefix,
    set_focus_options,
)
from quest_geometric.nn.focus.config import current_decode_config, decode_config
from quest_geometric.nn.focus.hf_cache import focus_cache_states

__all__ = [
    "MODES",
    "PATH_MODES",
    "SMOLLM2",
    "DecodeMode",
    "build_model",
    "common_arguments",
    "kept_share",
    "main",
    "run",
    "synthetic_cache",
]

#: SmolLM2-135M's configuration (``transformers.LlamaConfig`` arguments).
SMOLLM2 = dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
               num_attention_heads=9, num_key_value_heads=3, head_dim=64, vocab_size=49152,
               max_position_embeddings=16384, rope_theta=100000.0, tie_word_embeddings=True)
#: The timed modes: full attention (``None``) and Focus hard top-k.
MODES = {"full": None, "top-1": 1, "top-2": 2}
#: ``--compare-paths``: each top-k with the fast step forced onto one of its two exact ways
#: of attending (``DecodeConfig.masked_share``: 0 always takes the masked SDPA over the cache, inf
#: the group-set stores); the plain modes choose per step.
PATH_MODES = {"top-1 stores": (1, math.inf), "top-1 masked": (1, 0.0),
              "top-2 stores": (2, math.inf), "top-2 masked": (2, 0.0)}


#: Seed of the order of the modes within each timed round (shuffled every round).
ROUND_SEED = 0


def build_model(layers: int = 30, window: int = 64, num_groups: int = 4, seed: int = 0):
    """A random-weight Llama of SmolLM2-135M's shape with Focus composed (eval mode)."""
    import transformers

    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(**dict(SMOLLM2, num_hidden_layers=layers))
    cfg._attn_implementation = "sdpa"
    model = transformers.LlamaForCausalLM(cfg).eval()
    compose_focus(model, num_groups=num_groups, top_k=2, window=window)
    return model


def synthetic_cache(model, context: int, top_k: Optional[int], cache: str, capacity: int,
                    seed: int = 0):
    """A KV cache holding ``context`` random keys/values per layer and, for Focus, each
    layer's state after routing ``context`` random hidden states."""
    import transformers

    g = torch.Generator().manual_seed(seed)
    cfg = model.config
    kv = cfg.num_key_value_heads
    if cache == "static":
        c = transformers.StaticCache(config=cfg, max_cache_len=capacity)
    else:
        c = transformers.DynamicCache(config=cfg)
    layers = [m for m in model.modules() if isinstance(m, FocusComposed)]
    for i, layer in enumerate(layers):
        k = torch.randn(1, kv, context, cfg.head_dim, generator=g)
        v = torch.randn(1, kv, context, cfg.head_dim, generator=g)
        if cache == "static":
            c.update(k, v, i, {"cache_position": torch.arange(context)})
        else:
            c.update(k, v, i)
        if top_k is None:
            continue
        layer.router.top_k = top_k
        with torch.no_grad():
            out, col = route_prefix(layer.router, torch.randn(context, cfg.hidden_size,
                                                              generator=g))
        st = FocusDecodeState(out.groups.new_empty(1, 0, top_k), out.groups.new_empty(1, 0),
                              col, torch.zeros(1, dtype=torch.long), store=True)
        st.append(out.groups.view(1, context, top_k))
        focus_cache_states(c)[id(layer)] = st  # what the layer's own prefill would register
    return c


def kept_share(model, c, window: int) -> float:
    """Mean share (over layers) of the cached keys the newest token attends to."""
    shares = []
    for st in focus_cache_states(c).values():
        g = st.groups[0]
        s = g.size(0)
        shared = (g.unsqueeze(-1) == g[-1].view(1, 1, -1)).flatten(1).any(1)
        near = torch.arange(s) >= s - 1 - window
        shares.append(float((shared | near).float().mean()))
    return statistics.fmean(shares) if shares else 1.0


class DecodeMode:
    """``steps`` greedy decoding steps of one mode on its own cache ``c`` (full attention
    for ``top_k=None``; ``masked_share`` forces ``DecodeConfig.masked_share`` for the call and
    puts it back)."""

    def __init__(self, model, c, top_k: Optional[int], steps: int,
                 masked_share: Optional[float] = None) -> None:
        self.model, self.cache, self.top_k, self.steps = model, c, top_k, steps
        self.masked_share = masked_share
        self.token = torch.tensor([[17]])

    def __call__(self) -> None:
        with torch.no_grad():
            if self.top_k is None:
                with focus_disabled(self.model):
                    self._run()
                return
            set_focus_options(self.model, top_k=self.top_k)
            tuning = {} if self.masked_share is None else {"masked_share": self.masked_share}
            with decode_config(**tuning):
                self._run()

    def _run(self) -> None:
        for _ in range(self.steps):
            self.model(self.token, cache=self.cache, use_cache=True)


def run(contexts=(1024, 4096, 8192), threads=(1, 2), caches=("dynamic", "static"),
        layers: int = 30, window: int = 64, num_groups: int = 4, steps: int = 4,
        rounds: int = 5, out_dir: str = "benchmarks/focus/results", name: str = "focus_decode_step",
        progress: bool = True, compare_paths: bool = False) -> Dict[str, Any]:
    """Time one cached decoding step of each mode (full attention, Focus top-1 and top-2;
    with ``compare_paths`` also each top-k forced onto one of the fast step's two ways) for
    every cache kind, context length and thread count, and write the table ``name`` (CSV,
    JSON, markdown) to ``out_dir``.

    Returns:
        ``{"rows": [...], "paths": {...}}``: one row per (cache, context, threads, mode) with
        the step time, its ratio to full attention (wall clock and CPU time) and the share of
        the cached keys read; the paths of the files written.
    """
    model = build_model(layers, window, num_groups)
    modes = {m: (k, None) for m, k in MODES.items()}
    if compare_paths:
        modes.update(PATH_MODES)
    rows: List[Dict[str, Any]] = []
    loads = []
    for cache in caches:
        for ctx in contexts:
            cap = ctx + (rounds + 2) * steps * len(modes) + 8
            caches_ = {m: synthetic_cache(model, ctx, k, cache, cap)
                       for m, (k, _) in modes.items()}
            share = {m: (kept_share(model, caches_[m], window) if k else 1.0)
                     for m, (k, _) in modes.items()}
            for nt in threads:
                torch.set_num_threads(nt)
                load_before = open("/proc/loadavg").read().split()[0]
                fns = {m: DecodeMode(model, caches_[m], k, steps, ms)
                       for m, (k, ms) in modes.items()}
                t = time_interleaved(fns, warmup=1, repeat=rounds, shuffle_seed=ROUND_SEED)
                wall = {m: t[m]["times"] for m in fns}
                cpu = {m: t[m]["cpu_times"] for m in fns}
                load = open("/proc/loadavg").read().split()[0]
                loads.append(float(load))
                for m in modes:
                    ratios = [b / a for a, b in zip(wall[m], wall["full"])]
                    cpu_ratios = [b / a for a, b in zip(cpu[m], cpu["full"])]
                    rows.append({"cache": cache, "context": ctx, "threads": nt, "mode": m,
                                 "ms_per_step": statistics.median(wall[m]) / steps * 1e3,
                                 "speed_vs_full": statistics.median(ratios),
                                 "min_ratio": min(ratios), "max_ratio": max(ratios),
                                 "cpu_ms_per_step": statistics.median(cpu[m]) / steps * 1e3,
                                 "cpu_speed_vs_full": statistics.median(cpu_ratios),
                                 "keys_read": share[m], "load1": f"{load_before}->{load}",
                                 "round_ratios": ratios, "cpu_round_ratios": cpu_ratios})
                if progress:
                    print(f"[{cache} {ctx} x{nt}] " + ", ".join(
                        f"{r['mode']} {r['ms_per_step']:.1f} ms ({r['speed_vs_full']:.2f}x)"
                        for r in rows[-len(modes):]) + f"  load {load}", flush=True)
            del caches_
    meta = {"model": f"random-weight Llama of SmolLM2-135M's shape, {layers} layers",
            "window": window, "K": num_groups, "steps_per_round": steps, "rounds": rounds,
            "round_order": f"shuffled every round (seed {ROUND_SEED})",
            "routers": "fresh (untrained), routing random hidden states",
            "contexts": list(contexts), "seed": 0,
            "masked_share": current_decode_config().masked_share,
            "part_work": current_decode_config().part_work,
            "machine_note": "load1 is /proc/loadavg's 1-minute load before->after each "
                            "block (near the thread count on an idle machine; higher when "
                            "other jobs share the cores)",
            "loadavg_end": open("/proc/loadavg").read().strip()}
    notes = ("speed_vs_full: the full-attention step time over the mode's (wall clock), "
             "true median of the per-round ratios (> 1: faster than full attention; the "
             "modes run in an order shuffled every round, every round's ratio in the JSON "
             "file, `round_ratios`); "
             "cpu_speed_vs_full: the same from the process's CPU time, less sensitive to "
             "other jobs taking the cores. keys_read: mean share of the cached keys the "
             "newest token attends to (window + shared group). 'top-k stores' / 'top-k "
             "masked': the fast step forced onto the group-set stores / one masked SDPA "
             "over the cache (the plain top-k rows choose per step, DecodeConfig.masked_share).")
    paths = write_results(name, rows, out_dir, meta=meta, notes=notes,
                          title="One cached decoding step, SmolLM2-135M shape, Focus vs full")
    return {"rows": rows, "paths": paths}


def common_arguments(doc: str) -> argparse.ArgumentParser:
    """The command line the decoding-step benchmarks share (``--quick``, contexts, threads,
    layers, steps, rounds, output)."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny smoke run (seconds)")
    p.add_argument("--contexts", type=int, nargs="+", default=[1024, 4096, 8192])
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--layers", type=int, default=30)
    p.add_argument("--steps", type=int, default=4, help="decoding steps per timed call")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--out", default="benchmarks/focus/results")
    p.add_argument("--name", default=None)
    return p


def main(argv: Optional[List[str]] = None) -> None:
    """The command line of ``python -m benchmarks.focus.decode_step`` (``--help`` lists it)."""
    p = common_arguments(__doc__)
    p.add_argument("--caches", nargs="+", default=["dynamic", "static"],
                   choices=["dynamic", "static"])
    p.add_argument("--compare-paths", action="store_true",
                   help="also time each top-k forced onto the stores / the masked SDPA")
    a = p.parse_args(argv)
    if a.quick:
        a.contexts, a.layers, a.rounds, a.steps = [256, 1024], 4, 2, 2
    t0 = time.perf_counter()
    run(a.contexts, a.threads, a.caches, a.layers, steps=a.steps, rounds=a.rounds,
        out_dir=a.out, compare_paths=a.compare_paths,
        name=a.name or ("focus_decode_step_quick" if a.quick else "focus_decode_step"))
    print(f"done in {time.perf_counter() - t0:.0f} s")



if __name__ == "__main__":
    from benchmarks._entry import quiet_tokenizers

    quiet_tokenizers()
    main()
