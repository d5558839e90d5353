"""Do two checkouts of quest_geometric run the central operators at the same speed?

    python -m benchmarks.operators.before_after --before PATH --after PATH \
        [--threads 1 2] [--rounds 3] [--subjects qsv qsv_compiled focus_blocks smollm2]

Each subject is timed in a fresh child process per (checkout, thread count, round), with
``PYTHONPATH`` set to the checkout, so the two versions never share an interpreter; the two
checkouts alternate in an order shuffled every round (seeded), and the reported ratio is the
median over rounds of time(before) / time(after) (above 1: the after checkout is faster).
The subjects use only public names, so any two versions of the package can be compared:

* ``qsv``: ``QSVConv(64, 64)`` on the kNN graph (k = 20, self loops) of 16,200 Fibonacci
  points, forward without gradient and forward + backward, eager;
* ``qsv_compiled``: the same under ``torch.compile(fullgraph=True)`` (first call excluded);
* ``focus_blocks``: ``FocusAttention(256, 4, num_groups=8, top_k=1, window=128,
  backend='blocks')``, one forward without gradient at 8,192 and 32,768 tokens;
* ``smollm2``: SmolLM2-135M composed with committed routers (``--routers``), one prefill
  of 8,176 tokens (``use_cache=True``, ``logits_to_keep=1``) then 16 greedy cached steps.

Run it on an idle machine; the 1-minute load average before and after each child is kept.
With ``--allocator reuse`` each child first raises glibc's ``mmap`` and trim thresholds
(``mallopt``, as :func:`quest_geometric.profile.memory.keep_freed_memory` does, here through
``ctypes`` so that any checkout can be timed): a ``[32768, 256]`` float32 tensor (32 MiB) is
otherwise served by a fresh ``mmap`` whenever the heap holds no free chunk that large, and
page-faulted in again at every call, how often depending on the heap's layout, which any
small change in a checkout's allocations shifts; faulting is dearer with two threads than
with one. The default, ``--allocator default``, leaves the allocator as a user would have it.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

CHILD = r'''
import json, sys, time
import torch
subject, threads, repeat, routers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
if sys.argv[5] == "reuse":  # keep freed memory for reuse (glibc): no mmap per large tensor
    import ctypes
    libc = ctypes.CDLL("libc.so.6")
    if not (libc.mallopt(-3, 1 << 30) and libc.mallopt(-1, (1 << 31) - 1)):
        raise RuntimeError("mallopt failed")
torch.set_num_threads(threads)
torch.manual_seed(0)
out = {}

def timed(fn, repeat):
    fn()
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter(); fn(); ts.append(time.perf_counter() - t0)
    return sorted(ts)[len(ts) // 2]

if subject in ("qsv", "qsv_compiled"):
    from quest_geometric.geometry import fibonacci_sphere, knn_graph
    from quest_geometric.nn import QSVConv
    ei = knn_graph(fibonacci_sphere(16200), 20, loop=True)
    conv = QSVConv(64, 64, heads=1)
    x = torch.randn(16200, 64)
    xg = x.clone().requires_grad_(True)
    f = torch.compile(conv, fullgraph=True) if subject == "qsv_compiled" else conv
    def fwd():
        with torch.no_grad():
            f(x, ei)
    def fwd_bwd():
        f(xg, ei).sum().backward()
    out["forward_s"] = timed(fwd, repeat)
    out["forward_backward_s"] = timed(fwd_bwd, repeat)
elif subject == "focus_blocks":
    from quest_geometric.nn.focus import FocusAttention
    layer = FocusAttention(256, 4, num_groups=8, top_k=1, window=128, backend="blocks").eval()
    for n in (8192, 32768):
        x = torch.randn(n, 256, generator=torch.Generator().manual_seed(n))
        with torch.no_grad():
            out[f"forward_{n}_s"] = timed(lambda: layer(x), repeat)
elif subject == "smollm2":
    from quest_geometric.models import load_smollm2
    from quest_geometric.nn.focus import load_routers
    import pydoc_data.topics
    model, tok = load_smollm2()
    load_routers(model, routers)
    text = " ".join(pydoc_data.topics.topics[k] for k in sorted(pydoc_data.topics.topics))
    ids = torch.tensor([tok(text)["input_ids"][:8176]])
    def run():
        with torch.no_grad():
            t0 = time.perf_counter()
            o = model(ids, use_cache=True, logits_to_keep=1)
            t1 = time.perf_counter()
            cache, nxt = o.cache, o.logits[:, -1:].argmax(-1)
            for _ in range(16):
                o = model(nxt, cache=cache, use_cache=True)
                cache, nxt = o.cache, o.logits[:, -1:].argmax(-1)
            return t1 - t0, time.perf_counter() - t1
    pre, dec = zip(*[run() for _ in range(repeat)])
    out["prefill_s"] = sorted(pre)[len(pre) // 2]
    out["decode_s"] = sorted(dec)[len(dec) // 2]
print("RESULT " + json.dumps(out))
'''

#: Timed calls per child (after one warm-up call, except ``smollm2``, whose one timed prefill
#: follows the model load) and rounds per (subject, threads) unless ``--rounds`` is given.
REPEAT = {"qsv": 30, "qsv_compiled": 30, "focus_blocks": 5, "smollm2": 1}
#: The allocator settings a child can run under (``--allocator``).
ALLOCATORS = ("default", "reuse")
ROUNDS = {"qsv": 9, "qsv_compiled": 3, "focus_blocks": 9, "smollm2": 2}


def load1() -> float:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return float("nan")


def child(root: str, subject: str, threads: int, routers: str,
          allocator: str = "default") -> dict[str, float]:
    """Time ``subject`` once in a fresh interpreter on the checkout ``root`` (``allocator``:
    ``'default'``, or ``'reuse'`` to keep freed memory for reuse, see the module docstring)."""
    if allocator not in ALLOCATORS:
        raise ValueError(f"allocator must be one of {ALLOCATORS}, got {allocator!r}")
    env = dict(os.environ, PYTHONPATH=root, OMP_NUM_THREADS=str(threads),
               MKL_NUM_THREADS=str(threads))
    cmd = [sys.executable, "-c", CHILD, subject, str(threads), str(REPEAT[subject]), routers,
           allocator]
    res = subprocess.run(cmd, env=env, cwd=root, capture_output=True, text=True, check=False)
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("RESULT ")]
    if res.returncode != 0 or not lines:
        raise RuntimeError(f"{subject} in {root} failed:\n{res.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def git_head(root: str) -> str:
    res = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True,
                         text=True, check=False)
    return res.stdout.strip()


def summarize(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    keys = sorted({(r["subject"], r["threads"], m) for r in records for m in r["before"]})
    for subject, threads, metric in keys:
        rs = [r for r in records if r["subject"] == subject and r["threads"] == threads]
        ratios = [r["before"][metric] / r["after"][metric] for r in rs]
        rows.append({"subject": subject, "threads": threads, "metric": metric,
                     "rounds": len(rs),
                     "before_s": statistics.median(r["before"][metric] for r in rs),
                     "after_s": statistics.median(r["after"][metric] for r in rs),
                     "speedup": statistics.median(ratios),
                     "speedup_min": min(ratios), "speedup_max": max(ratios)})
    return rows


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    head = ("| subject | threads | metric | rounds | before_s | after_s | before/after "
            "(median) | min | max |\n|---|---|---|---|---|---|---|---|---|\n")
    body = "".join(
        f"| {r['subject']} | {r['threads']} | {r['metric']} | {r['rounds']} | "
        f"{r['before_s']:.4g} | {r['after_s']:.4g} | {r['speedup']:.3f} | "
        f"{r['speedup_min']:.3f} | {r['speedup_max']:.3f} |\n" for r in rows)
    conds = "".join(f"- {k}: {v}\n" for k, v in meta.items())
    return "### Operators before and after a change: paired timings\n\n" + head + body + \
        "\n" + conds


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before", required=True)
    p.add_argument("--after", required=True)
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--rounds", type=int, default=None,
                   help="rounds per subject and thread count (default: ROUNDS)")
    p.add_argument("--subjects", nargs="+", default=list(REPEAT), choices=list(REPEAT))
    p.add_argument("--routers-before", default="",
                   help="router folder the before checkout loads (its own file format)")
    p.add_argument("--routers-after", default="",
                   help="router folder the after checkout loads")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--allocator", choices=ALLOCATORS, default="default",
                   help="'reuse': each child keeps freed memory for reuse (glibc mallopt), so "
                        "large tensors are not page-faulted in afresh at every call")
    p.add_argument("--out", default="benchmarks/operators/results/before_after")
    a = p.parse_args(argv)
    rng = random.Random(a.seed)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": f"{platform.processor() or platform.machine()}, "
                       f"{os.cpu_count()} cores",
            "python": platform.python_version(), "seed": a.seed,
            "before": git_head(a.before), "after": git_head(a.after),
            "routers_before": a.routers_before or "none",
            "routers_after": a.routers_after or "none", "allocator": a.allocator}
    records: list[dict[str, Any]] = []
    for subject in a.subjects:
        for threads in a.threads:
            for rnd in range(a.rounds or ROUNDS[subject]):
                order = ["before", "after"]
                rng.shuffle(order)
                rec: dict[str, Any] = {"subject": subject, "threads": threads, "round": rnd,
                                       "order": order, "load_before": load1()}
                for which in order:
                    rec[which] = child(getattr(a, which), subject, threads,
                                       getattr(a, f"routers_{which}"), a.allocator)
                rec["load_after"] = load1()
                records.append(rec)
                print(json.dumps(rec), flush=True)
                write(Path(a.out), meta, records)  # after every round: a stop loses nothing
    print(markdown(summarize(records), meta))


def write(out: Path, meta: dict[str, Any], records: list[dict[str, Any]]) -> None:
    """The JSON file (conditions, summary rows, every round) and the markdown table."""
    rows = summarize(records)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows,
                                                    "records": records}, indent=1))
    out.with_suffix(".md").write_text(markdown(rows, meta))


if __name__ == "__main__":
    main()
