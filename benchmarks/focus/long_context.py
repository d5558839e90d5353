r"""Focus at the length where its speed is measured (issue 54, part 1): the quality of
SmolLM2-135M, full attention, context cuts and the operating-point rows, on single long
documents, at 8,192 tokens.

**Windows.** A window is :math:`L` = 8,192 consecutive tokens of one document, tokenized once
without special tokens (as the operating-point study does). Out of domain: one window per
file, tokens :math:`[0, L)` of a Debian-installed technical document of at least :math:`L`
tokens (:data:`OOD_FILES`; each file's path, size and SHA-256 are recorded). In domain: the
test topics of the language-reference split
(:func:`~quest_geometric.datasets.pydoc_topic_splits`) joined in sorted order
(:func:`~quest_geometric.datasets.pydoc_text`); only one test topic ('types') reaches
:math:`L` tokens alone, so a document here is that contiguous test-split text, and its
windows end at evenly spaced tokens (their trailing segments are disjoint, their contexts
overlap, so test windows are not independent samples).

**Measures**, for each window and configuration, from one forward of the window:

- the per-target loss :math:`\ell_t = -\log p(x_t \mid x_{<t})`, :math:`1 \le t < L`
  (:func:`window_nll`);
- the **trailing loss** :math:`\frac1T \sum_{t=L-T}^{L-1} \ell_t`, :math:`T` = 1,024
  (:func:`trailing_loss`; its exponential is the trailing perplexity);
- the **loss by position**: the mean of :math:`\ell_t` over each bin
  :math:`[bB, (b+1)B)` of :math:`B` = 512 positions (:func:`position_bins`; bin 0 has
  :math:`B - 1` targets, position 0 has none).

**Context cut to** :math:`C`: the model sees only the :math:`C` tokens
:math:`x_{L-1-C}, \dots, x_{L-2}` (a fresh sequence, positions from 0) and predicts the
targets :math:`x_{L-C}, \dots, x_{L-1}`; the first of the trailing targets is predicted
from :math:`C - T + 1` tokens, the last from :math:`C`. With :math:`C = L - 1` this is full
attention on every target. Focus rows and the content-free baselines are the
operating-point study's rows (:func:`~benchmarks.focus.operating_point.
apply_config`); ``sinks@ROW`` is matched to row ``ROW``'s share of pairs at :math:`L`
tokens, and each Focus forward also measures the share of causal pairs its layers kept.
"""
from __future__ import annotations

import copy
import gzip
import hashlib
import math
import time
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence

import torch

#: Window length, trailing tokens scored, position-bin width.
LENGTH, TRAIL, BIN = 8192, 1024, 512

#: Context cuts of full attention.
CUTS = (1024, 2048, 4096)

#: Out-of-domain documents: single Debian-installed technical texts of >= 8,192 SmolLM2
#: tokens (none is Python documentation; all are read as text, ``.gz`` decompressed).
OOD_FILES = (
    "/usr/share/doc/man-db/man-db-manual.txt.gz",
    "/usr/share/doc/libpng16-16/libpng-manual.txt.gz",
    "/usr/share/doc/libjpeg62-turbo-dev/libjpeg.txt.gz",
    "/usr/share/doc/sed/sedfaq.txt.gz",
    "/usr/share/doc/lsof/00FAQ.gz",
    "/usr/share/doc/libslang2/slang.txt.gz",
    "/usr/share/doc/xproto/x11protocol.txt.gz",
    "/usr/share/doc/make/ABOUT-NLS.gz",
)

#: Rows whose routers were trained further on long blocks (issue 54 part 2), each with the
#: row whose routers it started from: compared with it, paired by window, and with its window
#: plus sinks (the same pattern, so the same matched window).
LONG_TRAINED = {"K16_top2_w256_distill_s4_c200_4k": "K16_top2_w256_distill_s4_c200",
                "K16_top2_w256_distill_s4_c200_4k_c28": "K16_top2_w256_distill_s4_c200_4k",
                "K16_top2_w256_lm_s4_c200_4k": "K16_top2_w256_distill_s4_c200",
                "K8_top2_w256_distill_s4_c160_4k": "K8_top2_w256_distill_s4_c160",
                "K8_top2_w256_lm_s4_c160_4k": "K8_top2_w256_distill_s4_c160"}

#: The rows the operating-point verdict chose, best first.
ROWS = ("K16_top2_w256_distill_s4_c200", "K4_top2_w64_distill_s4_c200",
        "K8_top2_w256_distill_s4_c160", "K4_top2_w256_distill_s4")


def _fail(where: str, what: str) -> ValueError:
    return ValueError(f"{where}: {what}")


def read_document(path: str) -> Dict[str, Any]:
    """The text of one file (``.gz`` decompressed, UTF-8, stripped) and its record:
    ``path``, ``bytes`` (size as stored), ``sha256`` (of the stored bytes)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"read_document: no file {path} on this machine")
    data = p.read_bytes()
    record = {"path": str(p), "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    if p.suffix == ".gz":
        data = gzip.decompress(data)
    return {"text": data.decode("utf-8", errors="replace").strip(), "record": record}


def token_sha(ids: Sequence[int]) -> str:
    """SHA-256 of a window's token ids (int64 little-endian bytes)."""
    return hashlib.sha256(torch.as_tensor(list(ids), dtype=torch.int64).numpy().tobytes()
                          ).hexdigest()


def _encode(tok: Any, text: str) -> List[int]:
    """Token ids of ``text`` without special tokens, as the study tokenizes."""
    return list(tok.encode(text, add_special_tokens=False))


def ood_windows(tok: Any, files: Sequence[str] = OOD_FILES, length: int = LENGTH
                ) -> List[Dict[str, Any]]:
    """One window per file: tokens ``[0, length)`` of the file's text. Files shorter than
    ``length`` tokens are refused, naming the file."""
    out = []
    for f in files:
        doc = read_document(f)
        ids = _encode(tok, doc["text"])
        if len(ids) < length:
            raise _fail("ood_windows", f"{f} has {len(ids)} tokens, fewer than {length}")
        win = ids[:length]
        out.append({"set": "ood", "ids": win, "start": 0, "end": length,
                    "doc_tokens": len(ids), "file": doc["record"], "sha": token_sha(win)})
    return out


def test_windows(tok: Any, n: int = 6, length: int = LENGTH) -> List[Dict[str, Any]]:
    """``n`` windows of the joined test topics, ending at evenly spaced tokens
    ``length + j * stride``, ``stride = (N - length) // (n - 1)`` (``N`` tokens in all), the
    first starting at token 0; each records the topics its text touches."""
    from quest_geometric.datasets import pydoc_text, pydoc_topic_splits

    topics = pydoc_topic_splits()[2]
    text = pydoc_text(topics)
    ids = _encode(tok, text)
    if len(ids) < length or n < 1:
        raise _fail("test_windows", f"{len(ids)} test tokens cannot give {n} windows of "
                    f"{length}")
    stride = (len(ids) - length) // max(n - 1, 1)
    starts = [_token_start(tok, text, t) for t in sorted(topics)]
    out = []
    for j in range(n):
        a, b = j * stride, j * stride + length
        touched = [t for t, s, e in starts if s < b and e > a]
        out.append({"set": "test", "ids": ids[a:b], "start": a, "end": b,
                    "doc_tokens": len(ids), "topics": touched, "sha": token_sha(ids[a:b])})
    return out


def _token_start(tok: Any, text: str, topic: str):
    """``(topic, first token, end token)`` of a topic inside the joined text, by tokenizing
    the text up to it (within a token of the joint tokenization's boundary)."""
    from quest_geometric.datasets import pydoc_text

    body = pydoc_text([topic])
    c = text.find(body)
    return topic, len(_encode(tok, text[:c])), len(_encode(tok, text[:c + len(body)]))


def train_coverage(tok: Any, windows: Dict[str, List[Dict[str, Any]]], n: int = 32,
                   trail: int = TRAIL) -> None:
    """Add to every window the share of its positions, and of its trailing ``trail``
    positions, that lie inside an ``n``-token window occurring in the routers' training
    text (:func:`~quest_geometric.datasets.covered_positions`; the training topics of
    :func:`~quest_geometric.datasets.pydoc_topic_splits`), in place."""
    from quest_geometric.datasets import (covered_positions, pydoc_text, pydoc_topic_splits,
                                          window_set)

    train = window_set(_encode(tok, pydoc_text(pydoc_topic_splits()[0])), n)
    for ws in windows.values():
        for w in ws:
            hit = covered_positions(w["ids"], train, n)
            w["train_covered"] = float(hit.mean())
            w["train_covered_trailing"] = float(hit[-trail:].mean())


def window_nll(model: Any, ids: Sequence[int], context: Optional[int] = None,
               chunk: int = 1024) -> torch.Tensor:
    r"""Per-position next-token loss of one window, float64 of length ``len(ids)``; NaN where
    no target is scored (position 0, and positions before ``len(ids) - context``).

    ``context=None``: one forward of the whole window; position :math:`t` holds
    :math:`-\log p(x_t \mid x_{<t})`. ``context=C``: the model sees only ids
    ``[L-1-C, L-1)`` (module docstring) and scores the last ``C`` targets. The logits are
    computed ``chunk`` positions at a time from the last hidden states (the vocabulary is
    49,152 wide: 1.6 GB of float32 logits at 8K at once)."""
    x = torch.as_tensor(list(ids), dtype=torch.long)
    L = x.numel()
    if context is not None and not 1 <= context <= L - 1:
        raise _fail("window_nll", f"'context' must be in [1, {L - 1}], got {context}")
    inp = x if context is None else x[L - 1 - context:L - 1]
    first = 1 if context is None else L - context  # position of the first target
    targets = x[first:]
    with torch.no_grad():
        hidden = model.get_decoder()(input_ids=inp.unsqueeze(0), use_cache=False)[0][0]
        hidden = hidden[:targets.numel()]  # the full window's last position predicts nothing
        head = model.get_output_embeddings()
        losses = [torch.nn.functional.cross_entropy(
            head(hidden[i:i + chunk]).float(), targets[i:i + chunk], reduction="none")
            for i in range(0, targets.numel(), chunk)]
    out = torch.full((L,), math.nan, dtype=torch.float64)
    out[first:] = torch.cat(losses).double()
    return out


def trailing_loss(nll: torch.Tensor, trail: int = TRAIL) -> float:
    """Mean loss of the last ``trail`` positions (refused when any is not scored)."""
    tail = nll[-trail:]
    if tail.numel() != trail or torch.isnan(tail).any():
        raise _fail("trailing_loss", f"the last {trail} positions are not all scored")
    return float(tail.mean())


def position_bins(nll: torch.Tensor, width: int = BIN) -> List[Optional[float]]:
    """Mean loss of each bin ``[b*width, (b+1)*width)``, NaN positions of bin 0's position 0
    skipped; ``None`` for a bin with another unscored position (a cut context)."""
    out: List[Optional[float]] = []
    for b in range(0, nll.numel(), width):
        v = nll[b:b + width]
        v = v[1:] if b == 0 else v
        out.append(None if torch.isnan(v).any() or v.numel() == 0 else float(v.mean()))
    return out


def pair_share(model: Any, ids: Sequence[int]) -> Dict[str, Any]:
    """One forward of ``ids`` that also records the mean share of causal pairs the Focus
    layers kept (:func:`~quest_geometric.nn.focus.focus_pair_share`, each layer's window and
    sinks); ``pairs_kept`` is 1.0 for a model without Focus layers."""
    from quest_geometric.nn.focus import focus_pair_share
    from quest_geometric.training.routers import router_outputs

    shares: List[float] = []
    with router_outputs(model) as routed:
        nll = window_nll(model, ids)
        for f, r in routed:
            shares.append(focus_pair_share(r.groups.flatten(0, -2), f.window, causal=f.causal,
                                           num_sinks=f.num_sinks))
    return {"nll": nll, "pairs_kept": sum(shares) / len(shares) if shares else 1.0}


def configurations(rows: Sequence[str] = ROWS) -> List[str]:
    """Every configuration name in order of importance: full, the cuts, then per row the
    row, its window plus sinks matched at :data:`LENGTH` and its random balanced groups."""
    from benchmarks.focus.operating_point import resolve_config

    names = ["full"] + [f"cut{c}" for c in CUTS]
    for row in rows:
        cfg = resolve_config(row)
        names += [row, f"sinks@{row}", f"K{cfg['K']}_top{cfg['top_k']}_w{cfg['window']}_random"]
    return list(dict.fromkeys(names))


def cell_order(windows: Dict[str, List[Dict[str, Any]]], configs: Sequence[str],
               first: int = 7) -> List[tuple]:
    """``(set, window index, config)`` in run order: the first ``first`` configurations
    window by window with both sets interleaved, then the rest the same way."""
    n = max(len(w) for w in windows.values())
    order = []
    for group in (configs[:first], configs[first:]):
        for j in range(n):
            for s in windows:
                if j < len(windows[s]):
                    order += [(s, j, c) for c in group]
    return order


def run_cell(base: Any, name: str, ids: Sequence[int], length: int = LENGTH,
             results: Optional[Path] = None, cfg: Optional[Dict[str, Any]] = None,
             trail: int = TRAIL, width: int = BIN) -> Dict[str, Any]:
    """One configuration on one window: a copy of the plain ``base`` model turned into
    ``name`` (``full``, ``cutC``, or a study row, or composed from ``cfg`` when given), its
    trailing loss, position bins, pairs kept and seconds."""
    t0 = time.perf_counter()
    if name.startswith("cut"):
        nll, kept = window_nll(base, ids, context=int(name[3:])), 1.0
    elif name == "full":
        nll, kept = window_nll(base, ids), 1.0
    else:
        model = copy.deepcopy(base)
        if cfg is not None:
            from benchmarks.focus.operating_point import compose_config

            compose_config(model, cfg)
        else:
            from benchmarks.focus.operating_point import RESULTS, apply_config

            cfg = apply_config(model, name, results or RESULTS, length=length)
        r = pair_share(model.eval(), ids)
        nll, kept = r["nll"], r["pairs_kept"]
    return {"config": name, "trailing_loss": trailing_loss(nll, trail),
            "bin_loss": position_bins(nll, width), "pairs_kept": kept,
            "window_cfg": (cfg or {}).get("window"), "seconds": time.perf_counter() - t0}


def done_cells(lines: Iterable[Dict[str, Any]]) -> Dict[tuple, Dict[str, Any]]:
    """The finished cells of a results file, keyed ``(set, window, config)``."""
    return {(r["set"], r["window"], r["config"]): r for r in lines}


def utc_now() -> str:
    """The time now, ``YYYY-MM-DD HH:MM UTC``."""
    import datetime

    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def conditions(threads: int) -> Dict[str, Any]:
    """Machine, versions, threads and date (the run's start) of a run, stored with every
    cell."""
    import platform

    import transformers

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": __import__("os").cpu_count(), "threads": threads,
            "torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(),
            "date": utc_now()}


def run_grid(base: Any, windows: Dict[str, List[Dict[str, Any]]], configs: Sequence[str],
             out: Path, first: int = 7, max_minutes: Optional[float] = None,
             cfgs: Optional[Dict[str, Dict[str, Any]]] = None, length: int = LENGTH,
             trail: int = TRAIL, width: int = BIN, log: Any = print) -> int:
    """Run every cell of :func:`cell_order` not yet in the JSON-lines file ``out``, appending
    one line per finished cell (so a stopped run resumes); a cell whose window's token hash
    differs from the file's record of that window is refused. Returns the cells run."""
    import json

    done = done_cells(json.loads(x) for x in out.read_text().splitlines()) \
        if out.is_file() else {}
    cond = conditions(torch.get_num_threads())
    t_end = None if max_minutes is None else time.monotonic() + 60 * max_minutes
    ran = 0
    for s, j, name in cell_order(windows, configs, first):
        w = windows[s][j]
        if (s, j, name) in done:
            if done[(s, j, name)]["sha"] != w["sha"]:
                raise _fail("run_grid", f"window {s}/{j} of {out} has other tokens than "
                            "this machine's (another file version?)")
            continue
        if t_end is not None and time.monotonic() > t_end:
            break
        row = run_cell(base, name, w["ids"], length=length, cfg=(cfgs or {}).get(name),
                       trail=trail, width=width)
        row.update({"set": s, "window": j, "sha": w["sha"], **cond,
                    "finished": utc_now()})
        with out.open("a") as fh:
            fh.write(json.dumps(row) + "\n")
        ran += 1
        log(f"{s}/{j} {name}: trailing {row['trailing_loss']:.4f} kept "
            f"{row['pairs_kept']:.3f} {row['seconds']:.0f} s")
    return ran


def window_records(windows: Dict[str, List[Dict[str, Any]]]) -> Dict[str, Any]:
    """The windows without their token ids: how each was made, for the results folder."""
    return {s: [{k: v for k, v in w.items() if k != "ids"} for w in ws]
            for s, ws in windows.items()}
