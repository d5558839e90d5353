"""The generated blocks of the README and the docs' results pages, from the result files.

Each public function takes ``load`` (``load(key)``: the parsed JSON of ``generate.SOURCES[key]``;
``load.link(key)``: a markdown link to that result's file, relative to the page) and
returns markdown. Numbers come only from the files; the words around them are templates.
"""
from __future__ import annotations

import math
from typing import Callable, NamedTuple

Load = Callable[[str], dict]  # with .link(key) and .path(key) methods, see generate.Results

#: The Focus rows of record in the operating-point verdict (each one chosen on validation
#: among its continuations), as the README shows them.
FOCUS_ROWS = ["K4_top2_w256_distill_s4", "K4_top2_w64_distill_s4_c200",
              "K8_top2_w64_distill_s4_c280", "K16_top2_w256_distill_s4_c200",
              "K16_top2_w256_lm_s4_c160"]


def _span(values, fmt: str = "{:.2f}", unit: str = "") -> str:
    lo, hi = min(values), max(values)
    a, b = fmt.format(lo), fmt.format(hi)
    if a == b:
        return f"{a}{unit}"
    return f"{a}{unit} to {b}{unit}" if "+" in fmt else f"{a}-{b}{unit}"


def _table(rows: list[tuple[str, ...]], header: tuple[str, ...]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _linked(load: Load, rows: list[tuple[str, str, str, str]]) -> str:
    """A headline table: result, operating point, measured value and the result file (a
    key of ``SOURCES``) it comes from."""
    return _table([(a, b, c, load.link(key)) for a, b, c, key in rows],
                  ("result", "operating point", "measured", "file"))


def _met(flags) -> str:
    flags = list(flags)
    return f"met in {sum(bool(f) for f in flags)} of {len(flags)}"


def _ci(row: dict, lo: str, hi: str, fmt: str = "{:+.2f}") -> str:
    return f"[{fmt.format(row[lo])}, {fmt.format(row[hi])}]"


def _p(p: float) -> str:
    return f"{p:.0e}".replace("e-0", "e-") if p < 0.001 else f"{p:.2g}"


def qsv_table(load: Load) -> str:
    """The QSV study's headline results, each with its operating point."""
    ls = load("qsv_layer_speed")
    speed = [r for r in ls["rows"] if r["layer"] == "QSVConv"]
    floor = load("qsv_floor")["rows"]
    layer = [r for r in load("qsv_compile")["rows"] if r["subject"] == "layer"]
    mem = {(r["points"], r["layer"]): r for r in load("qsv_memory")["rows"]}
    top = max(p for p, _ in mem)
    ablation = load("qsv_ablation")
    abl = {r["variant"]: r for r in ablation["rows"]}
    nodes = sum(ablation["meta"]["config"]["sphere_sizes"])
    points = " and ".join(f"{p:,}" for p in sorted({r["points"] for r in floor}))
    graphs = "/".join(str(g) for g in sorted({r["graphs"] for r in speed}))
    rows = [
        ("`QSVConv` forward + backward vs `TransformerConv` (speed / peak memory)",
         f"batches of {graphs} sphere graphs, in-degree {ls['meta']['k']}, CPU, 1-2 threads",
         _span([r["speedup_vs_transformer"] for r in speed], unit="x") + " / "
         + _span([r["memory_vs_transformer"] for r in speed], unit="x"), "qsv_layer_speed.md"),
        ("forward time in sparse products over fixed weights (target within 2x)",
         f"torch-harmonics grids of {points} points, eager and compiled",
         _span([1 / r["fwd_vs_spmm"] for r in floor], "{:.1f}", "x") + ", "
         + _met(r["floor_target_met"] for r in floor), "qsv_vs_torch_harmonics_targets.md"),
        ("forward + backward in sparse products' forward + backward (target within 3x)",
         "same", _span([1 / r["fb_vs_spmm"] for r in floor], "{:.1f}", "x") + ", "
         + _met(r["fb_floor_target_met"] for r in floor), "qsv_vs_torch_harmonics_targets.md"),
        ("`torch.compile` against eager, forward + backward (target >= 1x)",
         "the layer on the same grids, 1-2 threads",
         _span([r["fb_vs_eager"] for r in layer], unit="x"), "qsv_compile_targets.md"),
        ("peak memory of one forward + backward",
         f"{top:,} points, in-degree {mem[(top, 'QSVConv')]['k']}",
         f"{mem[(top, 'QSVConv')]['peak_mb'] / 1024:.1f} GiB", "qsv_memory.md"),
    ]
    for v, what in (("no_transport", "no transport"), ("uniform", "uniform attention"),
                    ("standard_attention", "standard attention W_Q, W_K, W_V")):
        r = abl[v]
        rows.append((f"digits ablation: {what} against QSV (accuracy points, 95% CI)",
                     f"8x8 digits on {nodes} sphere nodes, {r['params']:,} parameters, "
                     f"{r['paired_n']} paired seeds",
                     f"{r['paired_delta']:+.2f} {_ci(r, 'delta_ci_low', 'delta_ci_high')}",
                     "qsv_ablation_digits.md"))
    return _linked(load, rows)


def qk_table(load: Load) -> str:
    """The query/key-geometry study's headline results."""
    share = load("qk_share")
    meta, steps = share["meta"], share["rows"]
    last = steps[-1]
    every = next(r for r in steps if r["share_every_later"] >= 0.9)
    setup = (f"CharGPT width {meta['n_embd']}, depths {'/'.join(map(str, meta['depths']))}, "
             f"{len(meta['inits'])} inits, {len(meta['seeds'])} seeds")
    tests = {r["test"]: r for r in load("qk_intervention")["rows"]}
    pre = load("qk_pretrained")["summary"]
    lay = pre["layers_pr_q_gt_pr_k"]
    corr = next(c for c in pre["correlations"]
                if c["x"] == "qk_effective_rank" and c["y"] == "attention_entropy")
    rows = [
        ("trajectories with PR_Q - PR_K > 0 at the end (95% CI over runs)",
         f"{setup}, step {last['step']:,}",
         f"{last['share']:.0%} [{last['boot_low']:.0%}, {last['boot_high']:.0%}]",
         "qk_geometry_long.md"),
        ("trajectories positive at every probe from a step on",
         f"same, from step {every['step']:,}",
         f"{every['share_every_later']:.0%} [{every['every_later_boot_low']:.0%}, "
         f"{every['every_later_boot_high']:.0%}]", "qk_geometry_long.md"),
    ]
    for name, what in (("entropy(shrink) < entropy(hold)", "holding it"),
                       ("entropy(shrink) < entropy(none)", "no control")):
        t = tests[name]
        rows.append((f"shrinking the key spectrum lowers attention entropy against {what}",
                     f"depth 4, {t['n_seeds']} seeds", f"{t['k_less']} of {t['n_seeds']} "
                     f"seeds, sign p = {_p(t['p_value'])}", "qk_geometry.md"))
    rows += [
        ("SmolLM2-135M layers with PR_Q - PR_K > 0", "one final checkpoint, "
         f"{lay['n']} layers", f"{lay['k_positive']} of {lay['n']}", "qk_pretrained.md"),
        ("SmolLM2-135M interaction rank vs attention entropy (Spearman, over layers)",
         "same", f"{corr['spearman_rho']:+.2f}, p = {_p(corr['p_value'])}", "qk_pretrained.md"),
    ]
    return _linked(load, rows)


def _lm_rows(load: Load) -> list[dict]:
    return [r for k in ("focus_lm_seed0", "focus_lm_seed1", "focus_lm_seed2")
            for r in load(k)["rows"]
            if r["model"].startswith("(b)") and r["mode"] == "hard" and r["top_k"] == 2]


def _speed(r: dict) -> str:
    return (f"prefill {r['prefill_1t']:.2f}x, decoding {r['decode_1t']:.2f}x "
            f"(1 thread, {r['speed_len_1t']:,} tokens)")


def _passkey(r: dict) -> str:
    return f"passkey 8K {r['passkey_8k']:.2f} (full {r['passkey_8k_full']:.2f})" \
        if "passkey_8k" in r else "passkey 8K not measured"


def focus_table(load: Load) -> str:
    """The Focus study's headline results: the kernel, a model trained from scratch, the
    in-domain pretrained run and the operating-point rows of record with their verdict."""
    k = load("focus_kernel")
    km, kr = k["meta"], k["rows"][0]
    lm = _lm_rows(load)
    ind = load("focus_in_domain")
    hard = next(r for r in ind["rows"] if r.get("eval") == "hard top-2")
    verdict = {r["name"]: r for r in load("focus_verdict")["rows"]}
    rows = [
        ("`'blocks'` attention vs causal SDPA (a kernel point, not a usable one)",
         f"K = {km['num_groups']}, top-{km['top_k']}, window {km['window']}, untrained, "
         f"{kr['tokens']:,} tokens, {kr['pair_fraction']:.1%} of pairs, 1 thread",
         f"{kr['speedup_attn']:.2f}x (whole layer {kr['speedup_blocks']:.2f}x)",
         "focus_speed_32k.md"),
        ("CharGPT trained from scratch, bits per character vs full attention",
         f"hard top-2, {_span([r['pair_fraction'] for r in lm], '{:.0%}')} of pairs, "
         f"{len(lm) // 2} seeds x 2 gates", _span([100 * r["rel_to_full"] for r in lm],
                                                  "{:+.2f}", "%"), "focus_lm.md"),
        ("SmolLM2-135M perplexity, validation overlapping training (not a verdict)",
         f"K = {ind['meta']['K']}, hard top-2, window {ind['meta']['window']}, "
         f"{hard['pairs_kept']:.1%} of pairs", f"{hard['delta_pct']:+.2f}% "
         f"+- {hard['delta_sem']:.2f}", "focus_pretrained_st_budget75_s620.md"),
    ]
    for name in FOCUS_ROWS:
        r = verdict[name]
        rows.append((f"SmolLM2-135M, routers `{name}` against full attention (verdict: "
                     f"{r['verdict']})",
                     f"K = {r['K']}, top-{r['top_k']}, window {r['window']}, "
                     f"{r['sinks']} sinks, {r['pairs_kept_8k']:.0%} of pairs at 8K",
                     f"{_ood(r)}; {_passkey(r)}; {_speed(r)}",
                     "focus_verdict.md"))
    return _linked(load, rows)


def _ood(r: dict) -> str:
    """Out-of-domain perplexity against full attention: at 8K (trailing 1,024 tokens, with
    its windows) where measured, and on the 1,024-token blocks."""
    at_1k = f"1K blocks {r['ood_delta_pct']:+.2f}%"
    if "ood_8k_pct" not in r:
        return f"out of domain: not at 8K; {at_1k}"
    n = r["ood_8k_windows"]
    return (f"out of domain at 8K {r['ood_8k_pct']:+.1f}% ({n} window{'s' if n != 1 else ''})"
            f", {at_1k}")


def verdict_sentence(load: Load) -> str:
    """Whether any configuration meets the operating-point target, from the verdict."""
    meta = load("focus_verdict")["meta"]
    t = meta["target"]
    target = (f"out-of-domain perplexity within {t['ood_delta_pct']:g}% of full attention, "
              f"passkey accuracy within {t['passkey_points']:g} points of it at "
              f"{t['length']:,} tokens, prefill and decoding {t['speedup']:g}x faster there "
              "at one and two threads, and better than both content-free baselines")
    met = meta["met_by"]
    if not met:
        return f"**No Focus configuration meets the target** ({target})."
    return f"Configurations meeting the target ({target}): " + ", ".join(
        f"`{m}`" for m in met) + "."


def _paired(c: dict) -> str:
    """A paired comparison of the 8K study: the perplexity change, its permutation p and the
    windows it is worse on."""
    return (f"{c['ppl_change_pct']:+.1f}% (permutation p = {_p(c['p_perm'])}, worse on "
            f"{c['worse']} of {c['n']} windows)")


def _against_window(c: dict, alpha: float = 0.05) -> str:
    """What the paired comparison with the window plus sinks says, in words."""
    if c["p_perm"] < alpha:
        return "loses to" if c["mean_diff"] > 0 else "beats"
    return "is not told apart from"


def long_context_sentence(load: Load) -> str:
    """The 8K answer: each Focus row's trailing perplexity at 8,192 tokens on out-of-domain
    documents against full attention and against the window plus sinks at its 8K share of
    pairs (paired by window), random balanced groups of its shape beside it, what cutting
    the context costs, and the row's speed at 8K from the verdict."""
    lc = load("focus_long_context")
    meta, ood = lc["meta"], lc["sets"]["ood"]
    verdict = load("focus_verdict")
    rows_v = {r["name"]: r for r in verdict["rows"]}
    target = verdict["meta"]["target"]["ood_delta_pct"]
    cuts = [n for n in ood if n.startswith("cut")]
    rows = [n for n in ood if n != "full" and n not in cuts and not n.startswith("sinks@")
            and not n.endswith("_random") and not ood[n].get("vs_parent")]
    longer = [n for n in ood if ood[n].get("vs_parent")]  # routers trained on long blocks
    least = verdict["meta"]["min_windows"]  # the fewest windows a paired test decides with
    short = [n for n in rows if not ood[n].get("vs_window")
             or ood[n]["vs_window"]["n"] < least]
    out = []
    for name in (n for n in rows if n not in short):
        r, v = ood[name], rows_v.get(name)
        shape = "_".join(name.split("_")[:3])  # K.._top.._w..: the random groups' name
        random = ood.get(f"{shape}_random")
        text = (f"At {meta['length']:,} tokens on out-of-domain documents (perplexity of the "
                f"last {meta['trail']:,} tokens, paired by window), `{name}` "
                f"({r['pairs_kept']:.0%} of pairs) is {_paired(r['vs_full'])} against full "
                "attention")
        if r.get("vs_window"):
            text += (f" and {_paired(r['vs_window'])} against the window plus sinks at the "
                     f"same share (window {ood[f'sinks@{name}']['window_cfg']:,})")
        if random is not None and random.get("vs_full"):
            text += f"; random balanced groups are {random['vs_full']['ppl_change_pct']:+.1f}%"
        test = lc["sets"].get("test", {}).get(name, {})
        if test.get("vs_window") and test["vs_window"]["n"] >= least:
            text += (f"; on documents of the test split it is {_paired(test['vs_full'])} "
                     f"against full attention and {_paired(test['vs_window'])} against the "
                     "window plus sinks")
        if cuts:
            text += ("; full attention with its context cut to "
                     + " / ".join(f"{int(c[3:]):,}" for c in cuts) + " tokens is "
                     + " / ".join(f"{ood[c]['vs_full']['ppl_change_pct']:+.1f}%"
                                  for c in cuts))
        if v is not None:
            text += (f". Its prefill at 8K runs {v['prefill_1t']:.2f}x / {v['prefill_2t']:.2f}x "
                     f"full attention and its decoding {v['decode_1t']:.2f}x / "
                     f"{v['decode_2t']:.2f}x at one / two threads (the bound its share sets: "
                     f"{v['prefill_bound_8k']:.2f}x)")
        within = r["vs_full"]["ppl_change_pct"] <= target
        versus = (f"{_against_window(r['vs_window'])} the window plus sinks"
                  if r.get("vs_window") else "is not compared with the window plus sinks")
        text += (f". So at 8K this learned routing {versus} and is "
                 f"{'within' if within else 'outside'} the target's {target:g}% of full "
                 "attention.")
        out.append(text)
    if longer:  # one paragraph, however many rows were trained further
        out.append(" ".join(_long_trained_sentence(name, ood[name], least) for name in longer))
    if short:
        out.append("Not yet measured on enough windows to decide (fewer than "
                   f"{least} paired with the window plus sinks): "
                   + ", ".join(f"`{n}` ({ood[n]['windows']})" for n in short) + ".")
    return "\n\n".join(out)


def _long_trained_sentence(name: str, r: dict, least: int) -> str:
    """Routers trained further on long blocks against the routers they started from, full
    attention and the window plus sinks (paired by window), with their revisit measure read
    as the verdict's plateau column reads it."""
    t = r.get("training") or {}
    how = (f" ({t['steps']} '{t['objective']}' steps on {t['block']:,}-token blocks)"
           if t.get("block") else "")
    text = (f"Routers trained further{how}, `{name}`, are {_paired(r['vs_parent'])} against "
            f"the routers `{r['vs_parent']['against']}` they started from on the same windows, "
            f"{_paired(r['vs_full'])} against full attention")
    if r.get("vs_window"):
        text += f" and {_paired(r['vs_window'])} against the window plus sinks"
    if r["vs_parent"]["n"] < least:
        text += f" (fewer than {least} windows: not yet a finding)"
    if t.get("revisit_mean") is not None:
        still = t.get("plateau") == "no"
        text += (f"; their revisit measure, {t['revisit_mean']:+.4f} +- {t['revisit_sem']:.4f}, "
                 + ("says they were still learning when training stopped" if still
                    else "no longer shows learning on blocks seen before"))
    return text + "."


def step_cost_sentence(load: Load) -> str:
    """The cost of one router training step at long blocks: the latest measurement of each
    length and memory option (CPU seconds and peak memory, one thread)."""
    runs = load("focus_long_context")["meta"].get("step_costs", [])
    if not runs:
        return "No router training step has been measured at long blocks yet."
    parts = []
    for r in runs:
        opts = ("decoder checkpointing and loss chunks of "
                f"{r['loss_chunk']:,}" if r.get("gradient_checkpointing") and r.get("loss_chunk")
                else "plain")
        cost = ("failed: allocation refused" if "failed" in r
                else f"{r['cpu_seconds_per_step']:.0f} CPU s")
        parts.append(f"{r['length']:,} tokens, {opts}: {cost}, {r['peak_rss_gib']:.1f} GiB "
                     "peak" + (f" (address space limited to "
                               f"{r['address_space_limit_gib']:.1f} GiB)"
                               if r.get("address_space_limit_gib") else ""))
    rows = sorted({f"`{r['row']}` ({r['objective']})" for r in runs})
    return (f"One router training step of {', '.join(rows)}, one thread, latest run of "
            "each: " + "; ".join(parts) + ".")


_SPLIT_COLS = ("row", "threads", "pairs at 8K", "prefill vs full", "bound", "of bound",
               "Focus attention: routing / planning / gathers / kernels / merge / glue (s)",
               "rest (s)", "decoding vs full", "step: cache / routing / attention / rest (ms)")


def time_split_table(load: Load) -> str:
    """Where each chosen row's time goes at 8K: its prefill against full attention and the
    bound its share of pairs sets, the parts of its attention, and a cached step's parts."""
    rows = []
    for r in load("focus_time_split")["rows"]:
        parts = " / ".join(f"{r[f'{p}_s']:.2f}" for p in
                           ("routing", "planning", "gathers", "kernels", "merge", "glue"))
        step = " / ".join(f"{r[f'{p}_ms']:.0f}" for p in
                          ("cache", "step_routing", "step_attention", "step_rest"))
        rows.append((f"`{r['config']}`", str(r["threads"]), f"{r['pairs_kept']:.0%}",
                     f"{r['prefill_speedup']:.2f}x", f"{r['prefill_bound']:.2f}x",
                     f"{r['of_bound']:.0%}", parts, f"{r['rest_s']:.1f}",
                     f"{r['decode_speedup']:.2f}x", step))
    return _table(rows, _SPLIT_COLS)


def decode_bound(full: dict) -> float:
    """The decoding speed-up a pattern could reach were its attention and routing free: full
    attention's step over the parts every mode pays (the cache update and the rest)."""
    return full["step_ms"] / (full["cache_ms"] + full["step_rest_ms"])


class _Frontier(NamedTuple):
    """The rows of the 8K frontier: the verdict's rows by name, the time split's rows by
    (configuration, threads), its thread counts, the Focus rows it times, those measured on
    enough 8K windows (``decided``) and those meeting the target."""
    verdict: dict
    by: dict
    threads: list
    rows: list
    decided: list
    met: list
    least: int


def _frontier(load: Load) -> _Frontier:
    split = load("focus_time_split")
    doc = load("focus_verdict")
    verdict, least = {r["name"]: r for r in doc["rows"]}, doc["meta"]["min_windows"]
    by = {(r["config"], r["threads"]): r for r in split["rows"]}
    threads = sorted({r["threads"] for r in split["rows"]})
    rows = [r["config"] for r in split["rows"] if r["threads"] == threads[0]
            and r["config"] != "full" and not r["config"].startswith("sinks@")]
    met = [n for n in rows if verdict.get(n, {}).get("verdict") == "meets the target"]
    decided = [n for n in rows if verdict.get(n, {}).get("ood_8k_windows", 0) >= least]
    return _Frontier(verdict, by, threads, rows, decided, met, least)


def frontier_summary(load: Load) -> str:
    """The 8K frontier in one sentence (the README's, after the verdict sentence): for each
    row measured on enough 8K windows, its out-of-domain trailing perplexity against full
    attention and against the window plus sinks at its share (with the windows on which it is
    worse and the permutation p), and its prefill at one thread against the bound its share
    of pairs sets, all as the verdict (and the README's table) has them."""
    f = _frontier(load)
    ood = load("focus_long_context")["sets"]["ood"]
    parts = []
    for name in f.decided:
        v = f.verdict[name]
        part = f"`{name}` ({v['pairs_kept_8k']:.0%} of the pairs) {v['ood_8k_pct']:+.1f}%"
        if "ood_8k_vs_window_pct" in v:
            w = ood[name]["vs_window"]
            part += (f", {v['ood_8k_vs_window_pct']:+.1f}% (worse on {w['worse']} of "
                     f"{w['n']} windows, p = {v['ood_8k_vs_window_p']:.2g})")
        parts.append(part + f", {v['prefill_1t']:.2f}x of {v['prefill_bound_8k']:.2f}x")
    return ("At 8,192 tokens, on out-of-domain text (against full attention, then against the "
            "window plus sinks at the same share) and in prefill at one thread (against the "
            "speed-up its share of pairs allows): "
            + "; ".join(parts) + ".")


def frontier_sentence(load: Load) -> str:
    """The 8K frontier: each chosen row measured on enough windows, its quality against full
    attention and the window plus sinks, its prefill against the bound its share sets and
    its decoding, beside the window plus sinks' speed; the other rows in one clause; the
    bound a free attention sets on decoding."""
    f = _frontier(load)
    verdict, by, threads, rows, decided, least = (f.verdict, f.by, f.threads, f.rows,
                                                  f.decided, f.least)
    ts = " / ".join(str(t) for t in threads)

    def x(name: str, key: str) -> str:
        return " / ".join(f"{by[(name, t)][key]:.2f}x" for t in threads)

    met = f.met
    out = ["No Focus configuration meets the target at 8,192 tokens." if not met else
           f"{', '.join(f'`{n}`' for n in met)} meet{'s' if len(met) == 1 else ''} the "
           "target at 8,192 tokens."]
    for name in decided:
        v, r = verdict[name], by[(name, threads[0])]
        text = (f"`{name}` keeps {r['pairs_kept']:.0%} of the pairs and is "
                f"{v['ood_8k_pct']:+.1f}% against full attention ({v['ood_8k_windows']} "
                "windows)")
        if "ood_8k_vs_window_pct" in v:
            text += (f" and {v['ood_8k_vs_window_pct']:+.1f}% against the window plus sinks "
                     f"(p = {v['ood_8k_vs_window_p']:.2g})")
        text += (f"; its prefill runs {x(name, 'prefill_speedup')} ({ts} threads) of the "
                 f"{r['prefill_bound']:.2f}x its share allows and its decoding "
                 f"{x(name, 'decode_speedup')}")
        if (f"sinks@{name}", threads[0]) in by:
            text += (f", while the window plus sinks at the same share runs "
                     f"{x(f'sinks@{name}', 'prefill_speedup')} and "
                     f"{x(f'sinks@{name}', 'decode_speedup')}")
        out.append(text + ".")
    others = [n for n in rows if n not in decided]
    if others:
        shares = [by[(n, threads[0])]["pairs_kept"] for n in others]
        bounds = [by[(n, threads[0])]["prefill_bound"] for n in others]
        out.append(f"The other rows keep {min(shares):.0%}-{max(shares):.0%} of the pairs "
                   f"(prefill bounds {min(bounds):.2f}-{max(bounds):.2f}x) and are measured "
                   f"on fewer than {least} windows.")
    full = [by[("full", t)] for t in threads]
    out.append("With free attention and routing a decoding step could be at most "
               + " / ".join(f"{decode_bound(f):.2f}x" for f in full)
               + " faster than full attention's: the cache update and the rest of the step "
               "remain.")
    return " ".join(out)


_Q_COLS = ("row", "pairs 8K", "8K out of domain (windows)", "8K vs window", "8K vs random",
           "1K out of domain", "1K median block", "1K test", "1K vs window (95% CI)",
           "1K vs random", "verdict")


def _at_8k(r: dict, key: str) -> str:
    """``+x.x% (p = ...)`` of an 8K column, empty where the row was not measured there."""
    if f"{key}_pct" not in r:
        return ""
    p = r.get(f"{key}_p")
    return f"{r[f'{key}_pct']:+.1f}%" + (f" (p = {p:.2g})" if p is not None else "")


def verdict_quality_table(load: Load) -> str:
    """Quality and baselines of every trained row of the verdict."""
    rows = []
    for r in load("focus_verdict")["rows"]:
        if r["kind"] != "trained":
            continue
        n = r.get("ood_8k_windows")
        rows.append((r["row"], f"{r['pairs_kept_8k']:.0%}",
                     _at_8k(r, "ood_8k") + (f" ({n})" if n else ""),
                     _at_8k(r, "ood_8k_vs_window"), _at_8k(r, "ood_8k_vs_random"),
                     f"{r['ood_delta_pct']:+.2f}%",
                     f"{r['ood_median_pct']:+.2f}%", f"{r['test_delta_pct']:+.2f}%",
                     f"{r['vs_window_pct']:+.2f}% "
                     f"{_ci(r, 'vs_window_ci_low', 'vs_window_ci_high', '{:+.1f}')}",
                     f"{r['vs_random_pct']:+.1f}%", r["verdict"]))
    return _table(rows, _Q_COLS)


def _acc(r: dict, key: str) -> str:
    v = r.get(key)
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.2f}"


def verdict_passkey_speed_table(load: Load) -> str:
    """Passkey accuracy and speed against full attention of every row of the verdict."""
    rows = []
    for r in load("focus_verdict")["rows"]:
        speed = [_acc(r, k) for k in ("prefill_1t", "decode_1t", "prefill_2t", "decode_2t")]
        rows.append((r["row"], r["kind"], *(_acc(r, f"passkey_{n}k") for n in (2, 4, 8)),
                     *speed, str(r.get("speed_len_1t", "")), r.get("speed_from", "")))
    return _table(rows, ("row", "kind", "passkey 2K", "passkey 4K", "passkey 8K",
                         "prefill 1t", "decode 1t", "prefill 2t", "decode 2t", "timed at",
                         "timing of"))


def passkey_full_sentence(load: Load) -> str:
    """Full attention's passkey accuracy at each length."""
    rows = [r for r in load("focus_passkey")["rows"]
            if r["config"] == "full" and r["depth"] == "all"]
    parts = [f"{r['correct']} of {r['n']} at {r['length']:,} tokens ({r['accuracy']:.2f}, "
             f"exact 95% interval {r['ci_low']:.2f}-{r['ci_high']:.2f})" for r in rows]
    return "Full attention answers " + "; ".join(parts) + "."


def data_splits_sentence(load: Load) -> str:
    """How much of the earlier validation text overlapped the training text."""
    rows = load("focus_data_splits")["rows"]
    old = next(r for r in rows if r["split"].startswith("old split: validation, first"))
    return (f"In the earlier split, {old['overlap']:.0%} of the {old['blocks']} validation "
            "blocks' token positions lie in a 32-token window found verbatim in the "
            "training tokens.")


def pretrained_caveat(load: Load) -> str:
    """The tour's caveat on the in-domain pretrained run (one sentence, one source), after
    checking its claim against the verdict."""
    from quest_geometric.tour import PRETRAINED_CAVEAT

    met = load("focus_verdict")["meta"]["met_by"]
    if met:
        raise ValueError(f"the verdict now has configurations meeting the target ({met}): "
                         "update quest_geometric.tour.PRETRAINED_CAVEAT")
    return PRETRAINED_CAVEAT


def focus_lm_seeds_table(load: Load) -> str:
    """The CharGPT Focus models against full attention of the same seed, per seed."""
    seeds = [load(k)["rows"] for k in ("focus_lm_seed0", "focus_lm_seed1", "focus_lm_seed2")]
    keys = [(r["model"], r["gate"], r["mode"], r["top_k"]) for r in seeds[0]
            if not r["model"].startswith("(a)") and r["top_k"] in (2, "2")]
    rows = []
    for key in keys:
        per = [next(r for r in rows_ if (r["model"], r["gate"], r["mode"], r["top_k"]) == key)
               for rows_ in seeds]
        mode = "soft" if key[2] == "soft" else f"hard top-{key[3]}"
        rows.append((f"{key[0]}, {key[1]}, {mode}",
                     _span([r["pair_fraction"] for r in per], "{:.0%}"),
                     *(f"{100 * r['rel_to_full']:+.2f}%" for r in per)))
    return _table(rows, ("model", "pairs kept", "seed 0", "seed 1", "seed 2"))


_QK_NAMES = {"qk_effective_rank": "effective rank", "qk_stable_rank": "stable rank",
             "attention_entropy": "entropy", "pr_q": "PR_Q", "pr_k": "PR_K",
             "pr_q_minus_pr_k": "PR_Q - PR_K", "layer_index": "depth (layer index)"}


def qk_pretrained_table(load: Load) -> str:
    """SmolLM2's query/key geometry: the sign of PR_Q - PR_K and every Spearman correlation."""
    summ = load("qk_pretrained")["summary"]
    rows = []
    for key, what in (("layers_pr_q_gt_pr_k", "layers"), ("heads_pr_q_gt_pr_k", "heads")):
        s = summ[key]
        rows.append((f"{what} with PR_Q - PR_K > 0",
                     f"{s['k_positive']} of {s['n']} ({s['share']:.0%}; 95% interval "
                     f"{s['ci_low']:.0%}-{s['ci_high']:.0%}; binomial p vs one half "
                     f"{_p(s['p_value_vs_half'])})"))
    for c in summ["correlations"]:
        rows.append((f"Spearman, {_QK_NAMES.get(c['x'], c['x'])} vs "
                     f"{_QK_NAMES.get(c['y'], c['y'])}, across {c['over']}",
                     f"{c['spearman_rho']:+.2f} (p = {_p(c['p_value'])}, n = {c['n']})"))
    return _table(rows, ("measure (SmolLM2)", "value"))


# --- docs/qsv.md: the CPU measurements its prose refers to -------------------------------

def _ratio_cell(rows: list[dict], key: str, invert: bool = False,
                flag: str | float | None = None) -> str:
    """The span of ``rows[key]`` (``1 / rows[key]`` with ``invert``) and, with ``flag`` (the
    rows' target column, or a threshold ``rows[key]`` must reach), how many rows meet the
    target and, where some do, the grid and threads of those that do not."""
    rows = [r for r in rows if isinstance(r.get(key), (int, float)) and not math.isnan(r[key])]
    if not rows:
        return "-"
    values = [r[key] for r in rows]
    text = _span([1 / v for v in values] if invert else values, unit="x")
    if flag is None:
        return text
    met = [bool(r[flag]) if isinstance(flag, str) else r[key] >= flag for r in rows]
    text += ", " + _met(met)
    if 0 < sum(met) < len(met):
        text += " (missed: " + "; ".join(
            f"{r['points']:,} points, {r['threads']} thread{'s' * (r['threads'] > 1)}"
            for r, ok in zip(rows, met) if not ok) + ")"
    return text


def qsv_targets_table(load: Load) -> str:
    """The layer against torch-harmonics, TransformerConv and the sparse-product floors,
    eager and compiled, each ratio with its target and the rows that miss it."""
    rows = load("qsv_floor")["rows"]
    eager = [r for r in rows if r["mode"] == "eager"]
    comp = [r for r in rows if r["mode"] == "compiled"]
    spec = [
        ("forward: torch-harmonics time / QSVConv time", ">= 1", "fwd_vs_th", False,
         "fwd_target_met"),
        ("forward + backward: torch-harmonics / QSVConv", ">= 3", "fb_vs_th", False,
         "fb_target_met"),
        ("forward + backward: TransformerConv / QSVConv", ">= 3", "fb_vs_tconv", False,
         "tconv_target_met"),
        ("forward: QSVConv / one sparse product over fixed weights", "<= 2", "fwd_vs_spmm",
         True, "floor_target_met"),
        ("forward + backward: QSVConv / that product's forward + backward", "<= 3",
         "fb_vs_spmm", True, "fb_floor_target_met"),
        ("native kernels: PyTorch path / native, forward", "", "native_fwd_speedup", False,
         None),
        ("native kernels: PyTorch path / native, forward + backward", "",
         "native_fb_speedup", False, None),
        ("compiled: eager / compiled, forward", ">= 1", "fwd_vs_eager", False, 1.0),
        ("compiled: eager / compiled, forward + backward", ">= 1", "fb_vs_eager", False, 1.0),
    ]
    table = [(what, target, _ratio_cell(eager, key, inv, flag), _ratio_cell(comp, key, inv, flag))
             for what, target, key, inv, flag in spec]
    points = " and ".join(f"{p:,}" for p in sorted({r["points"] for r in rows}))
    threads = " and ".join(str(t) for t in sorted({r["threads"] for r in rows}))
    return (_table(table, ("ratio", "target", "eager", "compiled"))
            + f"\n\nThe grids of {points} points, {threads} threads; from "
            + load.path("qsv_vs_torch_harmonics_targets.md") + ".")


def qsv_compile_table(load: Load) -> str:
    """``torch.compile`` against eager for the layer alone and for a ``QSVNet``."""
    rows = load("qsv_compile")["rows"]
    layer = [r for r in rows if r["subject"] == "layer"]
    net = [r for r in rows if r["subject"] == "net"]
    sizes = " and ".join(f"{s:,}" for s in sorted({r["size"] for r in layer}))
    threads = " and ".join(str(t) for t in sorted({r["threads"] for r in rows}))

    def met(sub, a, b):
        return _met(r[a] >= 1 and r[b] >= 1 and not r["graph_breaks"] for r in sub)

    table = [
        ("the layer", f"{sizes} points", _span([r["fwd_vs_eager"] for r in layer], unit="x"),
         _span([r["fb_vs_eager"] for r in layer], unit="x"),
         met(layer, "fwd_vs_eager", "fb_vs_eager")),
        ("`QSVNet`, `dense=None`", f"{net[0]['size']:,} nodes",
         _span([r["fwd_vs_eager"] for r in net], unit="x"),
         _span([r["fb_vs_eager"] for r in net], unit="x"),
         met(net, "fwd_vs_eager", "fb_vs_eager")),
        ("`QSVNet` of `QSVConv(dense=True)`", f"{net[0]['size']:,} nodes",
         _span([r["dense_fwd_vs_eager"] for r in net], unit="x"),
         _span([r["dense_fb_vs_eager"] for r in net], unit="x"),
         met(net, "dense_fwd_vs_eager", "dense_fb_vs_eager")),
    ]
    return (_table(table, ("compiled", "size", "forward, eager / compiled",
                           "forward + backward", "no slower, no graph break"))
            + f"\n\n{threads} threads; from " + load.path("qsv_compile_targets.md") + ".")


def qsv_kernels_table(load: Load) -> str:
    """The inference passes, the forward by operator, and the layer against
    ``TransformerConv`` on small and on batched sphere graphs."""
    epi = load("qsv_epilogue")["rows"]
    ops = load("qsv_breakdown")["rows"]
    small = load("qsv_small_graphs")["rows"]
    speed = [r for r in load("qsv_layer_speed")["rows"] if r["layer"] == "QSVConv"]
    by_run: dict[tuple, dict[str, float]] = {}
    for r in ops:
        by_run.setdefault((r["points"], r["threads"]), {})[r["op"]] = r["in_spmm"]
    attend = [d["quest_geometric::qsv_attend_rotate"] for d in by_run.values()]
    prepare = [d["quest_geometric::qsv_prepare"] for d in by_run.values()]
    rest = [d["total"] - d["quest_geometric::qsv_attend_rotate"]
            - d["quest_geometric::qsv_prepare"] for d in by_run.values()]
    points = " and ".join(f"{p:,}" for p in sorted({r["points"] for r in epi}))
    s0 = small[0]

    def tconv(p):
        return [r["qsv_speedup"] for r in small if r["layer"] == "TransformerConv"
                and r["pass"] == p]

    graphs = "/".join(str(g) for g in sorted({r["graphs"] for r in speed}))
    nodes = speed[0]["nodes"] // speed[0]["graphs"]

    def threads(rs):
        return " and ".join(str(n) for n in sorted({r["threads"] for r in rs})) + " threads"
    rows = [
        ("inference: the two fused passes against the training path's kernels (speed-up)",
         f"{points} points, {threads(epi)}", _span([r["speedup"] for r in epi], unit="x"),
         "qsv_forward_epilogue.md"),
        ("eager forward by operator, in sparse products: attention kernel with its "
         "epilogue / per-node pass / the rest", f"{points} points, {threads(ops)}",
         f"{_span(attend, '{:.2f}')} / {_span(prepare, '{:.2f}')} / {_span(rest, '{:.2f}')}",
         "qsv_forward_breakdown.md"),
        ("forward, TransformerConv / QSVConv", f"{s0['graphs']} digit graphs of "
         f"{s0['nodes'] // s0['graphs']} nodes, {threads(small)}",
         _span(tconv("forward"), unit="x"), "qsv_small_graphs.md"),
        ("forward + backward, TransformerConv / QSVConv", "same",
         _span(tconv("forward+backward"), unit="x"), "qsv_small_graphs.md"),
        ("forward + backward, TransformerConv / QSVConv (speed / QSVConv's peak memory "
         "in TransformerConv's)",
         f"batches of {graphs} sphere graphs of {nodes:,} nodes, {threads(speed)}",
         _span([r["speedup_vs_transformer"] for r in speed], unit="x") + " / "
         + _span([r["memory_vs_transformer"] for r in speed], unit="x"),
         "qsv_layer_speed.md"),
    ]
    return _table([(a, b, c, load.path(key)) for a, b, c, key in rows],
                  ("result", "operating point", "measured", "file"))


def _signed(v: float) -> str:
    return "0" if v == 0 else f"{v:+g}"


def qsv_ablation_table(load: Load) -> str:
    """The digits ablation with its paired comparisons to QSV, and whether each sign is
    decided (interval off zero and both exact tests below 0.05)."""
    rows = load("qsv_ablation")["rows"]
    out = []
    for r in rows:
        acc = f"{r['acc_mean']:.2f} +- {r['acc_std']:.2f}"
        if r["variant"] == "qsv":
            out.append((r["description"], str(r["seeds"]),
                        str(r["epochs"]), acc, "0", "-", "-", "-", "-", "-",
                        _signed(r["paper_delta"])))
            continue
        decided = ((r["delta_ci_low"] > 0 or r["delta_ci_high"] < 0)
                   and r["perm_p"] < 0.05 and r["sign_p"] < 0.05)
        out.append((
            r["description"], str(r["seeds"]), str(r["epochs"]), acc,
            f"{r['paired_delta']:+.2f} {_ci(r, 'delta_ci_low', 'delta_ci_high')}",
            _p(r["t_p"]), _p(r["perm_p"]), r["wins_vs_qsv"], _p(r["sign_p"]),
            "yes" if decided else "no", _signed(r["paper_delta"])))
    return (_table(out, ("variant", "seeds", "epochs", "test accuracy (%)",
                         "paired delta vs QSV [95% paired t interval]", "t-test p",
                         "permutation p", "wins", "sign p", "sign decided",
                         "paper delta (CIFAR-10)"))
            + "\n\nFrom " + load.path("qsv_ablation_digits.md") + ".")
