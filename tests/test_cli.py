"""The command line's user errors: one line on stderr, exit status 2, never a traceback."""
import subprocess
import sys

import pytest
import torch

from quest_geometric.__main__ import main
from quest_geometric.tour import MANIFEST, TourError, check_output_dir, resolve_device


def test_unknown_only_is_one_line_error(capsys, tmp_path):
    assert main(["tour", "--only", "nope", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown part(s) nope" in err[0]
    assert not (tmp_path / "r").exists()


def test_refuses_foreign_output_folder(tmp_path):
    (tmp_path / "keep.txt").write_text("precious")
    for force in (False, True):  # --force replaces only a previous tour's own files
        with pytest.raises(TourError, match=r"not a previous tour report \(keep.txt\)"):
            check_output_dir(tmp_path, force=force)
    assert (tmp_path / "keep.txt").read_text() == "precious"  # checking never deletes


def test_previous_report_needs_force_and_empty_folder_is_reusable(tmp_path):
    assert check_output_dir(tmp_path, force=False) is None  # empty folder
    (tmp_path / MANIFEST).write_text('{"format": 2}\n{"file": "report.md"}\n')
    (tmp_path / "report.md").write_text("old")
    with pytest.raises(TourError, match="holds a previous tour report; pass --force"):
        check_output_dir(tmp_path, force=False)
    assert check_output_dir(tmp_path, force=True).files == {"report.md"}
    assert (tmp_path / "report.md").read_text() == "old"


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
        [sys.executable, "-m", "quest_geometric", "tour", "--only", "nope", "--out",
         str(tmp_path / "x")],
        capture_output=True, text=True,
    )
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert out.stderr.strip().startswith("quest-geometric tour: error:")


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
    # every option of the tour is explained
    for option in ("--out", "--only", "--device", "--force", "--results", "--no-progress",
                   "--threads"):
        assert option in out
    # wrapped for a terminal (issue 30: one description line was not)
    assert max(map(len, out.splitlines())) <= 90, max(out.splitlines(), key=len)


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


# ------------------------------------------------ issue 53: answers before any heavy import
_NO_TORCH = """
import sys
from quest_geometric.__main__ import main
try:
    code = main(sys.argv[1:])
except SystemExit as e:
    code = e.code
print("exit", code, "torch imported:", "torch" in sys.modules)
"""


@pytest.mark.parametrize("argv, code", [(["--help"], 0), (["tour", "--help"], 0),
                                        (["tour", "--only", "nope"], 2), (["tour", "--x"], 2)])
def test_help_and_argument_errors_import_no_torch(argv, code):
    out = subprocess.run([sys.executable, "-c", _NO_TORCH, *argv], capture_output=True,
                         text=True, timeout=120)
    assert out.stdout.strip().splitlines()[-1] == f"exit {code} torch imported: False", out
    if argv[-1] == "nope":
        assert out.stderr.strip() == ("quest-geometric tour: error: --only: unknown part(s) "
                                      "nope; choose from qsv, focus, qk, pretrained")


def test_cli_part_names_are_the_tours_parts():
    from quest_geometric.__main__ import PART_NAMES
    from quest_geometric.tour import PARTS

    assert PART_NAMES == tuple(PARTS)


@pytest.mark.slow
def test_the_package_imports_its_subpackages_on_first_use():
    out = subprocess.run([sys.executable, "-c",
                          "import sys, quest_geometric as q; a = 'torch' in sys.modules; "
                          "print(a, q.nn.__name__, 'torch' in sys.modules)"],
                         capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["False", "quest_geometric.nn", "True"], out.stderr
