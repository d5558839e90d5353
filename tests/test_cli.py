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


def test_tour_parts_are_the_three_studies():
    from quest_geometric.tour import PARTS

    assert list(PARTS) == ["qsv", "focus", "qk"]
