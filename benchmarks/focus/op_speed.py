r"""Speed of SmolLM2-135M at the Focus operating point (issue 31, section 5): time to first
token and cached greedy decoding, full attention against every configuration of
:mod:`~benchmarks.focus.operating_point`, at 2K, 4K and 8K tokens.

For each context length :math:`L` every configuration is built by
:func:`~benchmarks.focus.operating_point.build_model` (``sinks@NAME`` with
its window matched at :math:`L`, the share row ``NAME`` keeps there) and, per round, timed
once on the same real prose (the passkey filler,
:func:`~benchmarks.focus.passkey.filler_tokens`):

- **prefill**: one forward of the :math:`L - N` prompt tokens with ``use_cache=True`` and
  ``logits_to_keep=1`` (as ``generate`` does), the time to first token;
- **decoding**: then :math:`N` greedy steps on that cache, one token each (tokens per
  second = :math:`N` / seconds), so the context ends at :math:`L` tokens (SmolLM2 has
  8,192 positions).

Each round times every configuration once, in an order shuffled by
``random.Random(seed)`` (one shuffle per round, :func:`round_orders`), so that a slow period
of a shared machine does not fall on one configuration only. The JSON file keeps every
round's raw times, its ratios configuration / full attention and ``/proc/loadavg`` with
``torch.get_num_threads()`` before and after the round. A row reports the true median over
rounds (the mean of the two middle values for an even count, :func:`statistics.median`) of
its seconds and of its per-round ratios, and the speed-up as the median of the per-round
full / configuration ratios (:func:`summarize_rounds`).

A row's verdict (at least :data:`TARGET` times faster than full attention in prefill *and* in
decoding) is only called when no other work ran: when the 1-minute load average before or
after any round exceeds the benchmark's own thread count by more than
:data:`~benchmarks.load.CONTENTION_MARGIN` (the benchmarks' rule), no verdict is
given and the table is marked "measured under load". Building and warming the models load
the machine themselves, so each length's rounds start once the 1-minute load has fallen to
the thread count (:func:`~benchmarks.load.wait_for_load`, at most 5 min).

Usage::

    python -m benchmarks.focus.op_speed --threads 1 [--quick] [--configs NAME ...]
        [--lengths 2048 4096 8192] [--rounds 5] [--new-tokens 32]
    python -m benchmarks.focus.op_speed --rewrite benchmarks/focus/results/focus_op_speed_1t.json
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import torch

from quest_geometric.profile import load_average, write_results
from benchmarks.focus.operating_point import (
    RESULTS,
    build_model,
    resolve_config,
)

__all__ = ["DEFAULT_CONFIGS", "DEFAULT_LENGTHS", "TARGET", "round_orders", "machine_state",
           "time_prefill_decode", "summarize_rounds", "run", "write_table", "main"]

#: Configurations timed beside full attention by default.
DEFAULT_CONFIGS = ("K8_top2_w64_distill", "K8_top2_w64_random", "sinks@K8_top2_w64_distill")
#: Context lengths (prompt plus generated tokens).
DEFAULT_LENGTHS = (2048, 4096, 8192)
#: The speed-up a configuration must reach in prefill and decoding (issue 31).
TARGET = 1.3
#: The reference every ratio is taken against.
REFERENCE = "full"


def _median(values: Sequence[float], where: str = "_median") -> float:
    """The true median (mean of the two middle values for an even count)."""
    values = list(values)
    if not values:
        raise ValueError(f"{where}: no value to take the median of")
    return float(statistics.median(values))


def round_orders(names: Sequence[str], rounds: int, seed: int = 0) -> List[List[str]]:
    """The order of each round: ``names`` shuffled once per round by one
    ``random.Random(seed)``, so every round holds every name once and the same seed gives the
    same orders.

    Args:
        names (Sequence[str]): the configurations (distinct).
        rounds (int): number of rounds (at least 1).
        seed (int): the shuffles' seed (default: :obj:`0`).

    Returns:
        list[list[str]]: one permutation of ``names`` per round.
    """
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"round_orders: 'rounds' must be an int >= 1, got {rounds!r}")
    if len(set(names)) != len(names):
        raise ValueError(f"round_orders: 'names' must be distinct, got {list(names)}")
    rng = random.Random(seed)
    orders = []
    for _ in range(rounds):
        order = list(names)
        rng.shuffle(order)
        orders.append(order)
    return orders


def machine_state() -> Dict[str, Any]:
    """``torch.get_num_threads()``, ``/proc/loadavg``'s three averages and the 1-minute one
    as a float (:obj:`None` where there is none)."""
    loadavg = load_average()
    try:
        load1: Optional[float] = float(loadavg.split()[0])
    except (ValueError, IndexError):
        load1 = None
    return {"threads": torch.get_num_threads(), "loadavg": loadavg, "load1": load1,
            "time": time.time()}


@torch.no_grad()
def time_prefill_decode(model: Any, prompt: torch.Tensor, new_tokens: int
                        ) -> Dict[str, float]:
    """Seconds of one prefill of ``prompt`` (``[1, T]``, ``use_cache=True``,
    ``logits_to_keep=1``) and of ``new_tokens`` greedy cached steps after it."""
    t0 = time.perf_counter()
    out = model(prompt, use_cache=True, logits_to_keep=1)
    t1 = time.perf_counter()
    cache, nxt = out.cache, out.logits[:, -1:].argmax(-1)
    t2 = time.perf_counter()
    for _ in range(new_tokens):
        out = model(nxt, cache=cache, use_cache=True)
        cache, nxt = out.cache, out.logits[:, -1:].argmax(-1)
    t3 = time.perf_counter()
    return {"prefill_s": t1 - t0, "decode_s": t3 - t2}


def summarize_rounds(records: Sequence[Dict[str, Any]], new_tokens: int,
                     reference: str = REFERENCE) -> List[Dict[str, Any]]:
    r"""One row per (length, configuration) from the rounds of :func:`run`.

    Each record holds ``length``, ``prefill_s`` and ``decode_s`` (configuration -> seconds
    of that round) and ``prefill_ratio`` / ``decode_ratio`` (configuration -> its seconds /
    the reference's, the same round). A row reports true medians over rounds: seconds,
    decoding tokens per second (``new_tokens`` / seconds, per round), the time ratio
    configuration / reference, and the speed-up (the median of the per-round
    reference / configuration ratios) with its smallest and largest round.

    Returns:
        list[dict]: rows sorted by length, the reference first.
    """
    rows = []
    for length in sorted({r["length"] for r in records}):
        recs = [r for r in records if r["length"] == length]
        keys = list(recs[0]["prefill_s"])
        names = sorted(keys, key=lambda n: (n != reference, keys.index(n)))
        for name in names:
            row: Dict[str, Any] = {"config": name, "length": length, "rounds": len(recs)}
            for part in ("prefill", "decode"):
                secs = [r[f"{part}_s"][name] for r in recs]
                ratios = [r[f"{part}_ratio"][name] for r in recs]
                speedups = [1.0 / x for x in ratios]
                row[f"{part}_s"] = _median(secs, "summarize_rounds")
                row[f"{part}_ratio"] = _median(ratios, "summarize_rounds")
                row[f"{part}_speedup"] = _median(speedups, "summarize_rounds")
                row[f"{part}_speedup_min"] = min(speedups)
                row[f"{part}_speedup_max"] = max(speedups)
            row["decode_tok_s"] = _median([new_tokens / r["decode_s"][name] for r in recs],
                                          "summarize_rounds")
            rows.append(row)
    return rows


def _under_load(records: Sequence[Dict[str, Any]]) -> bool:
    """Other work beside the benchmark before or after any round: a 1-minute load above the
    benchmark's own threads by more than
    :data:`~benchmarks.load.CONTENTION_MARGIN` (the benchmarks' rule), or
    no load known. The benchmark's threads are part of the load while it runs, so a load
    of 1.05 under a one-thread run is an idle machine."""
    from benchmarks.load import CONTENTION_MARGIN

    states = [s for r in records for s in (r["before"], r["after"])]
    return any(s["load1"] is None or s["load1"] > s["threads"] + CONTENTION_MARGIN
               for s in states)


def run(configs: Sequence[str] = DEFAULT_CONFIGS, lengths: Sequence[int] = DEFAULT_LENGTHS,
        rounds: int = 5, new_tokens: int = 32, seed: int = 0, results: Path = RESULTS,
        warmup_tokens: int = 64, progress: bool = True) -> Dict[str, Any]:
    """Time full attention and every configuration at every length (module docstring).

    Args:
        configs (Sequence[str]): row names of the operating-point study (full attention is
            always timed as the reference).
        lengths (Sequence[int]): context lengths :math:`L` (prompt :math:`L - N`).
        rounds (int): timed rounds per length (default: :obj:`5`).
        new_tokens (int): :math:`N`, tokens decoded per round (default: :obj:`32`).
        seed (int): the seed of the rounds' orders (default: :obj:`0`).
        results (Path): folder of the routers and evaluated rows.
        warmup_tokens (int): one untimed pass of each model on this many tokens per length
            (default: :obj:`64`).
        progress (bool): print each round (default: :obj:`True`).

    Returns:
        dict: ``records`` (one per round: length, order, raw seconds, ratios, machine state
        before and after), ``rows`` (:func:`summarize_rounds`), ``patterns`` (length ->
        configuration -> resolved pattern) and ``under_load``.
    """
    from benchmarks.focus.passkey import filler_tokens
    from benchmarks.load import wait_for_load

    if isinstance(new_tokens, bool) or not isinstance(new_tokens, int) or new_tokens < 1:
        raise ValueError(f"run: 'new_tokens' must be an int >= 1, got {new_tokens!r}")
    names = [REFERENCE] + [c for c in dict.fromkeys(configs) if c != REFERENCE]
    for name in names:  # a bad name fails before any model is loaded
        resolve_config(name, results)
    for length in lengths:
        if isinstance(length, bool) or not isinstance(length, int) or length <= new_tokens:
            raise ValueError(f"run: every length must be an int above 'new_tokens' "
                             f"({new_tokens}), got {length!r}")
    orders = round_orders(names, rounds * len(lengths), seed)
    fixed: Dict[str, Any] = {}  # models whose pattern does not depend on the length
    tokens: Optional[List[int]] = None
    records: List[Dict[str, Any]] = []
    patterns: Dict[str, Dict[str, Any]] = {}
    for li, length in enumerate(lengths):
        models = {}
        for name in names:
            per_length = name.startswith("sinks@")
            if per_length or name not in fixed:
                model, tok = build_model(name, results, length=length if per_length else None)
                if not per_length:
                    fixed[name] = model
            models[name] = model if per_length else fixed[name]
            patterns.setdefault(str(length), {})[name] = resolve_config(
                name, results, length=length if per_length else None)
        if tokens is None:
            tokens = filler_tokens(tok)
        if len(tokens) < length:
            raise ValueError(f"run: the prose has {len(tokens)} tokens, fewer than the length "
                             f"{length}")
        prompt = torch.tensor([tokens[:length - new_tokens]])
        for name in names:  # untimed: first-call allocations, lazy initialisations
            time_prefill_decode(models[name], prompt[:, :warmup_tokens], 2)
        # building and warming the models loaded the machine: let the 1-minute load forget it
        wait_for_load(torch.get_num_threads())
        for r in range(rounds):
            order = orders[li * rounds + r]
            before = machine_state()
            timed = {name: time_prefill_decode(models[name], prompt, new_tokens)
                     for name in order}
            after = machine_state()
            rec = {"length": length, "round": r, "order": order, "before": before,
                   "after": after, "prompt_tokens": prompt.shape[1], "new_tokens": new_tokens}
            for part in ("prefill", "decode"):
                secs = {name: timed[name][f"{part}_s"] for name in names}
                rec[f"{part}_s"] = secs
                rec[f"{part}_ratio"] = {name: secs[name] / secs[REFERENCE] for name in names}
            records.append(rec)
            if progress:
                print(f"[op-speed] L={length} round {r}: " + ", ".join(
                    f"{n} prefill {rec['prefill_ratio'][n]:.2f} decode "
                    f"{rec['decode_ratio'][n]:.2f}" for n in names if n != REFERENCE)
                    + f" (load {after['loadavg']})", flush=True)
        del models
    return {"records": records, "rows": summarize_rounds(records, new_tokens),
            "patterns": patterns, "under_load": _under_load(records)}


#: The table's columns.
COLUMNS = ["config", "length", "rounds", "prefill_s", "prefill_speedup", "prefill_speedup_min",
           "prefill_speedup_max", "decode_tok_s", "decode_speedup", "decode_speedup_min",
           "decode_speedup_max", "verdict"]


def write_table(meta: Dict[str, Any], out: Any = "benchmarks/focus/results",
                name: Optional[str] = None) -> Dict[str, Any]:
    """Write ``focus_op_speed_<T>t[_quick].{csv,json,md}`` from a run's ``meta`` (its
    ``rounds``, ``rounds_per_length``, ``new_tokens``, ``threads``, ``quick`` and the rest of
    the conditions): the
    rows of :func:`summarize_rounds`, each with its verdict, none where the machine was
    under load (:func:`_under_load`). Conditions already in ``meta`` (date, machine,
    versions) are kept, so a table rebuilt from a saved JSON file (``--rewrite``) keeps the
    conditions it was measured under.

    Returns:
        dict: ``rows``, ``under_load`` and the ``paths`` written.
    """
    from benchmarks.load import CONTENTION_MARGIN

    records = meta["rounds"]
    new_tokens, threads = meta["new_tokens"], meta["threads"]
    under = _under_load(records)
    rows = summarize_rounds(records, new_tokens)
    for row in rows:
        if row["config"] == REFERENCE:
            row["verdict"] = "reference"
        elif under:
            row["verdict"] = "none (under load)"
        else:
            fast = min(row["prefill_speedup"], row["decode_speedup"]) >= TARGET
            row["verdict"] = f"{'meets' if fast else 'below'} {TARGET}x"
    name = name or f"focus_op_speed_{threads}t" + ("_quick" if meta.get("quick") else "")
    title = (f"Focus operating point: prefill and cached decoding against full attention, "
             f"{threads} thread{'s' if threads > 1 else ''}")
    if under:
        title += " (measured under load: no verdict)"
    rounds = meta["rounds_per_length"]
    notes = (f"Per length L: prefill = one forward of L - {new_tokens} prompt tokens "
             f"(use_cache, logits_to_keep=1; time to first token), then {new_tokens} greedy "
             f"cached decoding steps. {rounds} rounds, each timing every configuration once in "
             f"a seeded shuffled order; `*_s`, `decode_tok_s`: medians over rounds; "
             f"`*_speedup`: median over rounds of full / configuration (min and max beside); "
             f"verdict: at least {TARGET}x in prefill and decoding, only called when the "
             f"1-minute load stayed at most {CONTENTION_MARGIN} above the benchmark's own "
             f"{threads} thread{'s' if threads > 1 else ''} before and after every round (no "
             f"other work). Raw times, per-round ratios, orders and loads: the JSON file's "
             f"`rounds`. sinks@NAME: window matched at each length (`patterns`).")
    meta = {**meta, "under_load": under, "target": TARGET,
            "load_rule": f"1-minute load <= threads + {CONTENTION_MARGIN}"}
    paths = write_results(name, rows, out, meta=meta, columns=COLUMNS, title=title,
                          notes=notes)
    return {"rows": rows, "under_load": under, "paths": paths}


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """``python -m benchmarks.focus.op_speed --threads T ...`` (``--help`` lists the
    options); writes ``focus_op_speed_<T>t[_quick].{csv,json,md}``."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", nargs="+", default=list(DEFAULT_CONFIGS),
                    help="rows of the operating-point study timed beside full attention")
    ap.add_argument("--lengths", type=int, nargs="+", default=None,
                    help=f"context lengths (default: {list(DEFAULT_LENGTHS)}; --quick: 2048)")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch threads (default: torch's); 1 and 2 are separate runs")
    ap.add_argument("--rounds", type=int, default=None, help="timed rounds (default: 5; "
                    "--quick: 3)")
    ap.add_argument("--new-tokens", type=int, default=None,
                    help="tokens decoded per round (default: 32; --quick: 8)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="2,048 tokens, 3 rounds, 8 tokens")
    ap.add_argument("--results", default=str(RESULTS),
                    help="folder of the trained routers and evaluated rows")
    ap.add_argument("--out", default="benchmarks/focus/results")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--rewrite", default=None, metavar="JSON",
                    help="time nothing: rebuild the table from a saved JSON file, keeping "
                         "its conditions (date, machine, versions)")
    a = ap.parse_args(argv)
    if a.rewrite is not None:
        saved = json.loads(Path(a.rewrite).read_text())
        return write_table(saved["meta"], a.out)
    lengths = a.lengths or ([2048] if a.quick else list(DEFAULT_LENGTHS))
    rounds = a.rounds or (3 if a.quick else 5)
    new_tokens = a.new_tokens or (8 if a.quick else 32)
    if a.threads is not None:
        if a.threads < 1:
            ap.error(f"'--threads' must be >= 1, got {a.threads}")
        torch.set_num_threads(a.threads)
    threads = torch.get_num_threads()
    t0 = time.time()
    out = run(a.configs, lengths, rounds, new_tokens, a.seed, Path(a.results),
              progress=not a.no_progress)
    meta = {"model": "SmolLM2-135M-Instruct (Q4_1, dequantised to float32)",
            "configs": [REFERENCE] + [c for c in a.configs if c != REFERENCE],
            "lengths": lengths, "rounds_per_length": rounds, "new_tokens": new_tokens,
            "seed": a.seed, "threads": threads, "quick": a.quick,
            "median": "true median "
            "(statistics.median: mean of the two middle values for an even count)",
            "patterns": out["patterns"], "rounds": out["records"],
            "wall_seconds": time.time() - t0}
    write_table(meta, a.out)
    return out


if __name__ == "__main__":
    from benchmarks._entry import quiet_tokenizers, require_smollm2

    require_smollm2()
    quiet_tokenizers()
    main()
