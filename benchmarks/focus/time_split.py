r"""Where SmolLM2-135M's time goes at 8K under a Focus row, against full attention and the
row's bound (issue 54, part 3): one prefill and cached greedy steps of the real composed
model, each split into its parts.

    python -m benchmarks.focus.time_split [--configs NAME ...] [--length 8192] \
        [--threads 1 2] [--rounds 3] [--new-tokens 8]
    python -m benchmarks.focus.time_split --fold benchmarks/focus/results/focus_time_split.json

Every configuration is built by :func:`~benchmarks.focus.operating_point.build_model`
(``sinks@NAME`` matched at the length) and timed on the same prose as
:mod:`~benchmarks.focus.op_speed` (the passkey filler): a prefill of :math:`L - N` tokens
(``use_cache=True``, ``logits_to_keep=1``), then :math:`N` greedy cached steps. Each round
times every configuration once, in an order shuffled every round (seeded). Timers
(``time.perf_counter`` around the function that does a part, summed over the 30 layers)
split the prefill into

* ``routing``: the router's forward (groups of every token);
* ``planning``: the block decomposition's plan (``_BlocksPlan``: buckets, band segments);
* ``gathers``: the rows gathered into bucket order (``_gather_rows``);
* ``kernels``: the flash-attention kernel calls (``_aten.flash_forward``; for full
  attention, Hugging Face's ``sdpa_attention_forward``);
* ``merge``: the log-sum-exp merge of the parts of top-2 rows (``_merge_part_list``);
* ``glue``: the rest of Focus's attention (Python, masks, index copies): the layer's
  ``attend`` minus the parts above;
* ``rest``: everything but the attention (projections, MLPs, norms, rotary, the head);

and a decoding step into ``cache`` (``Cache.update``), ``step_routing`` (``route_step``),
``step_attention`` (``focus_decode_attention`` / ``sdpa_attention_forward``) and
``step_rest``. A row's **bound** is :func:`~benchmarks.focus.operating_point.
prefill_speedup_bound` at the share of causal pairs its Focus layers keep on the prompt
(:func:`~benchmarks.focus.long_context.pair_share`): the prefill speed-up its pattern
allows were the attention's cost proportional to the pairs and routing free; ``of_bound``
is the measured speed-up over it. Times are medians over the rounds; the speed-ups the
medians of the per-round ratios to full attention. ``--fold`` puts a saved run's speed-ups
into the canonical speed table (:func:`fold`), which the verdict reads.
"""
from __future__ import annotations

import argparse
import random
import statistics
import time
from collections import defaultdict
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch

from benchmarks.focus.long_context import ROWS
from benchmarks.focus.operating_point import RESULTS, build_model, prefill_speedup_bound

__all__ = ["PREFILL_PARTS", "STEP_PARTS", "Timers", "install", "split_prefill",
           "split_step", "run", "main"]

#: The prefill's timed parts (seconds, summed over the layers); ``glue`` and ``rest`` are
#: derived (:func:`split_prefill`).
PREFILL_PARTS = ("routing", "planning", "gathers", "kernels", "merge")
#: A cached step's timed parts; ``step_rest`` is derived (:func:`split_step`).
STEP_PARTS = ("cache", "step_routing", "step_attention")
#: The configurations timed beside full attention by default: every row the long-context
#: study evaluates and its window plus sinks at the same share.
DEFAULT_CONFIGS = tuple(name for row in ROWS for name in (row, f"sinks@{row}"))
ROUND_SEED = 0


class Timers:
    """Wrap attributes of modules or classes with timers that add their seconds to
    :attr:`acc` under a part's name; :meth:`restore` puts the originals back."""

    def __init__(self) -> None:
        self.acc: Dict[str, float] = defaultdict(float)
        self._saved: List[tuple] = []

    def wrap(self, owner: Any, name: str, part: str) -> None:
        f = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        acc = self.acc

        def timed(*a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return f(*a, **kw)
            finally:
                acc[part] += time.perf_counter() - t0

        self._saved.append((owner, name, f))
        setattr(owner, name, timed)

    def restore(self) -> None:
        for owner, name, f in reversed(self._saved):
            setattr(owner, name, f)
        self._saved.clear()


def install() -> Timers:
    """The timers of the module docstring, installed (the caller restores them)."""
    import transformers.cache_utils as cu
    import transformers.integrations.sdpa_attention as sd

    from quest_geometric.nn.focus import _aten, blocks
    from quest_geometric.nn.focus import composed as comp
    from quest_geometric.nn.focus.module import FocusAttention
    from quest_geometric.nn.focus.random_router import RandomGroupsRouter
    from quest_geometric.nn.focus.router import FocusRouter
    from quest_geometric.nn.focus.window_router import WindowOnlyRouter

    t = Timers()
    t.wrap(FocusAttention, "attend", "focus")
    for cls in (FocusRouter, RandomGroupsRouter, WindowOnlyRouter):
        t.wrap(cls, "forward", "routing")
    t.wrap(blocks._BlocksPlan, "__init__", "planning")
    t.wrap(blocks, "_gather_rows", "gathers")
    t.wrap(blocks, "_merge_part_list", "merge")
    t.wrap(_aten, "flash_forward", "kernels")
    t.wrap(sd, "sdpa_attention_forward", "sdpa")
    t.wrap(cu.Cache, "update", "cache")
    t.wrap(comp, "route_step", "step_routing")
    t.wrap(comp, "focus_decode_attention", "step_attention")
    return t


def split_prefill(acc: Dict[str, float], total: float) -> Dict[str, float]:
    """A prefill's parts in seconds from the timers' sums: the timed parts, ``glue`` (the
    layer's attention minus them) and ``rest`` (the prefill minus the attention); full
    attention's kernel is its ``sdpa`` time."""
    out = {p: acc.get(p, 0.0) for p in PREFILL_PARTS}
    focus = acc.get("focus", 0.0)
    if focus:
        out["glue"] = max(0.0, focus - sum(out.values()))
        out["rest"] = total - focus
    else:
        out["kernels"] = acc.get("sdpa", 0.0)
        out["glue"] = 0.0
        out["rest"] = total - out["kernels"]
    return out


def split_step(acc: Dict[str, float], total: float, steps: int) -> Dict[str, float]:
    """A cached step's parts (seconds per step): ``cache``, ``step_routing``,
    ``step_attention`` (Focus's decoding attention or full attention's SDPA call) and
    ``step_rest``."""
    att = acc.get("step_attention", 0.0) or acc.get("sdpa", 0.0)
    out = {"cache": acc.get("cache", 0.0), "step_routing": acc.get("step_routing", 0.0),
           "step_attention": att}
    out["step_rest"] = total - sum(out.values())
    return {k: v / steps for k, v in out.items()}


def _kept(model: Any, ids: Sequence[int]) -> float:
    from benchmarks.focus.long_context import pair_share

    return float(pair_share(model, ids)["pairs_kept"])


@torch.no_grad()
def _time_one(model: Any, prompt: torch.Tensor, new_tokens: int, timers: Timers
              ) -> Dict[str, float]:
    timers.acc.clear()
    t0 = time.perf_counter()
    out = model(prompt, use_cache=True, logits_to_keep=1)
    prefill = time.perf_counter() - t0
    pre = split_prefill(dict(timers.acc), prefill)
    cache, nxt = out.cache, out.logits[:, -1:].argmax(-1)
    timers.acc.clear()
    t1 = time.perf_counter()
    for _ in range(new_tokens):
        out = model(nxt, cache=cache, use_cache=True)
        cache, nxt = out.cache, out.logits[:, -1:].argmax(-1)
    decode = time.perf_counter() - t1
    return {"prefill_s": prefill, "step_s": decode / new_tokens, **pre,
            **split_step(dict(timers.acc), decode, new_tokens)}


def run(configs: Sequence[str] = DEFAULT_CONFIGS, length: int = 8192,
        threads: Sequence[int] = (1, 2), rounds: int = 3, new_tokens: int = 8,
        results: Any = RESULTS, log: Callable[[str], None] = print) -> Dict[str, Any]:
    """Time full attention and ``configs`` at ``length`` tokens for every thread count
    (module docstring). Returns ``{'rows', 'records'}``: one row per (threads,
    configuration) with the medians of every part and the speed-ups, and every round's
    raw parts."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    import transformers.integrations.sdpa_attention as sd

    from benchmarks.load import wait_for_load

    from benchmarks.focus.passkey import filler_tokens

    names = ["full"] + [c for c in dict.fromkeys(configs) if c != "full"]
    models, kept = {}, {}
    for name in names:
        models[name], tok = build_model(name, results, length=length)
    ids = filler_tokens(tok)[:length]
    if len(ids) < length:
        raise ValueError(f"run: the prose has {len(ids)} tokens, fewer than {length}")
    prompt = torch.tensor([ids[:length - new_tokens]])
    timers = install()
    saved = ALL_ATTENTION_FUNCTIONS["sdpa"]
    ALL_ATTENTION_FUNCTIONS["sdpa"] = sd.sdpa_attention_forward  # the timed function
    records: List[Dict[str, Any]] = []
    done: Dict[int, Dict[str, List[Dict[str, float]]]] = {}
    try:
        shuffle = random.Random(ROUND_SEED)
        for nt in threads:
            torch.set_num_threads(nt)
            for name in names:  # untimed: first-call allocations
                _time_one(models[name], prompt[:, :64], 2, timers)
            per: Dict[str, List[Dict[str, float]]] = {n: [] for n in names}
            wait_for_load(nt)
            for r in range(rounds):
                order = list(names)
                shuffle.shuffle(order)
                load = open("/proc/loadavg").read().split()[0]
                for name in order:
                    per[name].append(_time_one(models[name], prompt, new_tokens, timers))
                records.append({"threads": nt, "round": r, "order": order, "load1": load,
                                **{n: per[n][-1] for n in names}})
                log(f"[time-split x{nt}] round {r}: " + ", ".join(
                    f"{n} {per[n][-1]['prefill_s']:.1f} s / {1e3 * per[n][-1]['step_s']:.0f} ms"
                    for n in names))
            done[nt] = per
    finally:
        timers.restore()
        ALL_ATTENTION_FUNCTIONS["sdpa"] = saved
    # the shares after the timing, so that their forwards do not load the machine before a
    # timed round (the load rule of op_speed reads the 1-minute load)
    for name in names:
        kept[name] = 1.0 if name == "full" else _kept(models[name], ids[:length - new_tokens])
    rows = [_row(name, nt, length, kept[name], per[name], per["full"])
            for nt, per in done.items() for name in names]
    return {"rows": rows, "records": records}


def _row(name: str, threads: int, length: int, kept: float, rounds: List[Dict[str, float]],
         full: List[Dict[str, float]]) -> Dict[str, Any]:
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    pre = statistics.median(f["prefill_s"] / r["prefill_s"] for f, r in zip(full, rounds))
    dec = statistics.median(f["step_s"] / r["step_s"] for f, r in zip(full, rounds))
    bound = prefill_speedup_bound(kept, length)
    row: Dict[str, Any] = {"config": name, "threads": threads, "length": length,
                           "rounds": len(rounds), "pairs_kept": round(kept, 4),
                           "prefill_s": med["prefill_s"], "prefill_speedup": pre,
                           "prefill_bound": bound, "of_bound": pre / bound}
    for p in (*PREFILL_PARTS, "glue", "rest"):
        row[f"{p}_s"] = med[p]
    row.update({"step_ms": 1e3 * med["step_s"], "decode_speedup": dec})
    for p in (*STEP_PARTS, "step_rest"):
        row[f"{p}_ms"] = 1e3 * med[p]
    return row


def op_speed_run(doc: Dict[str, Any], threads: int) -> Dict[str, Any]:
    """The rounds of a saved run (``focus_time_split.json``) at ``threads`` as a run of
    :mod:`benchmarks.focus.op_speed` (its rows, verdicts and conditions), so that
    :mod:`benchmarks.focus.op_speed_canonical` can fold it into the canonical speed table:
    one answer to "how fast is this row at 8K", the latest timing. The machine counts as
    under load when the 1-minute load before any round exceeds the threads by more than
    :data:`~benchmarks.load.CONTENTION_MARGIN` (op_speed's rule)."""
    from benchmarks.focus.op_speed import REFERENCE, TARGET, summarize_rounds
    from benchmarks.load import CONTENTION_MARGIN

    meta, n = doc["meta"], doc["meta"]["new_tokens"]
    mine = [r for r in meta["records"] if r["threads"] == threads]
    if not mine:
        raise ValueError(f"op_speed_run: no round at {threads} thread(s)")
    records = []
    for rec in mine:
        pre = {k: rec[k]["prefill_s"] for k in rec["order"]}
        dec = {k: rec[k]["step_s"] * n for k in rec["order"]}
        records.append({"length": meta["length"], "prefill_s": pre, "decode_s": dec,
                        "prefill_ratio": {k: v / pre[REFERENCE] for k, v in pre.items()},
                        "decode_ratio": {k: v / dec[REFERENCE] for k, v in dec.items()}})
    under = any(float(r["load1"]) > threads + CONTENTION_MARGIN for r in mine)
    rows = summarize_rounds(records, n)
    for row in rows:
        fast = min(row["prefill_speedup"], row["decode_speedup"]) >= TARGET
        row["verdict"] = ("reference" if row["config"] == REFERENCE else "none (under load)"
                          if under else f"{'meets' if fast else 'below'} {TARGET}x")
    keep = ("date", "cpu_model", "processor", "cpu_count", "torch", "python")
    return {"meta": {**{k: meta.get(k) for k in keep}, "threads": threads,
                     "rounds_per_length": len(mine), "new_tokens": n, "under_load": under,
                     "source": "benchmarks.focus.time_split"}, "rows": rows}


def fold(path: Any, folder: Any = None) -> List[Any]:
    """Fold the saved run ``path`` into the canonical speed tables, one per thread count it
    ran (:func:`op_speed_run`); returns the tables' JSON paths."""
    import json
    from pathlib import Path

    from benchmarks.focus import op_speed_canonical as canon

    folder = Path(canon.CANONICAL if folder is None else folder)
    doc = json.loads(Path(path).read_text())
    out = []
    for t in sorted({r["threads"] for r in doc["meta"]["records"]}):
        runs = canon.runs_of(op_speed_run(doc, t))
        old = canon.canonical_path(t, folder)
        if old.is_file():
            runs += canon.runs_of(json.loads(old.read_text()))
        rows, used = canon.merge_runs(runs)
        out.append(canon.write_canonical(rows, used, t, folder))
    return out


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """The command line of ``python -m benchmarks.focus.time_split``."""
    from quest_geometric.profile import write_results

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", nargs="+", default=list(DEFAULT_CONFIGS))
    p.add_argument("--length", type=int, default=8192)
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--new-tokens", type=int, default=8)
    p.add_argument("--out", default="benchmarks/focus/results")
    p.add_argument("--name", default="focus_time_split")
    p.add_argument("--fold", default=None, metavar="JSON",
                   help="fold a saved run into the canonical speed tables, time nothing")
    a = p.parse_args(argv)
    if a.fold:
        return {"paths": fold(a.fold)}
    res = run(a.configs, a.length, a.threads, a.rounds, a.new_tokens)
    meta = {"model": "SmolLM2-135M-Instruct (Q4_1 weights, float32)", "length": a.length,
            "new_tokens": a.new_tokens, "rounds": a.rounds, "round_seed": ROUND_SEED,
            "round_order": "shuffled every round", "records": res["records"]}
    notes = ("Prefill parts in seconds and step parts in ms, medians over the rounds, summed "
             "over the layers (module docstring of benchmarks.focus.time_split); speed-ups are "
             "the medians of the per-round ratios full / configuration; prefill_bound the "
             "speed-up the row's share of pairs allows (prefill_speedup_bound), of_bound the "
             "measured share of it.")
    res["paths"] = write_results(a.name, res["rows"], a.out, meta=meta, notes=notes,
                                 title=f"Where the time goes at {a.length} tokens: prefill and "
                                       "cached decoding, per part")
    return res


if __name__ == "__main__":
    from benchmarks._entry import quiet_tokenizers

    quiet_tokenizers()
    main()
