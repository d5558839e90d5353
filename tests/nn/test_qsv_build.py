"""The kernel cache of QSVConv's native kernels is trusted or not used
(quest_geometric.nn._qsv_build): planted, foreign, symlinked and truncated libraries are never
loaded or never crash the process; $CC and the cache path are honoured or refused clearly.
Each risky case runs in a process of its own."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from quest_geometric.nn import _qsv_build as build

ROOT = Path(__file__).resolve().parents[2]
#: What the child process runs: the kernels' status, then a QSVConv call checked against the
#: layer without kernels (so a fallback or a rebuilt library is shown to compute the layer).
CHILD = """
import warnings, torch
warnings.simplefilter("always")
from quest_geometric.nn import _qsv_native as n
from quest_geometric.testing.qsv import knn_edges, make_qsv_conv
status = n.qsv_native_status()
print("STATUS", status["available"], status["path"])
conv, x, ei = make_qsv_conv(16), torch.randn(30, 16, dtype=torch.float64), knn_edges(30, 4)
out = conv(x, ei)
n.set_qsv_native_enabled(False)
torch.testing.assert_close(out, conv(x, ei))
print("SAME")
"""
PLANTED = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void planted(void) {
    const char *marker = getenv("PLANTED_MARKER");
    FILE *f = marker ? fopen(marker, "w") : NULL;
    if (f) fclose(f);
}
int qsv_kernels_version(void) { return 12; }
"""

pytestmark = pytest.mark.slow


def _child(env: dict, cwd: Path | None = None) -> subprocess.CompletedProcess:
    full = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", **env)
    for name in ("QUEST_GEOMETRIC_CACHE", "XDG_CACHE_HOME", "CC"):
        if name in env and env[name] is None:
            full.pop(name, None)
    return subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                          env={k: v for k, v in full.items() if v is not None},
                          timeout=600, cwd=cwd)


def _expected_name() -> str:
    command = build.compiler_command()
    if command is None:
        pytest.skip("no C compiler")
    return build._name(command, build.FLAGS + build.OPENMP_FLAGS, build.SOURCE.read_bytes())


def _planted_library(tmp_path: Path) -> Path:
    """A library whose constructor writes a marker file, with the kernels' version symbol
    and nothing else."""
    src = tmp_path / "planted.c"
    src.write_text(PLANTED)
    lib = tmp_path / "planted.so"
    subprocess.run([*build.compiler_command(), "-shared", "-fPIC", "-o", str(lib), str(src)],
                   check=True, capture_output=True)
    return lib


def _plant(folder: Path, library: Path, name: str, link: bool = False) -> Path:
    target = folder / name
    if link:
        target.symlink_to(library)
    else:
        shutil.copyfile(library, target)
    digest = hashlib.sha256(library.read_bytes()).hexdigest()
    (folder / (name + ".sha256")).write_text(digest + "\n")
    return target


def _assert_rebuilt(done: subprocess.CompletedProcess, marker: Path, why: str) -> None:
    assert done.returncode == 0, done.stderr
    assert not marker.exists(), "the planted library's code ran"
    assert "STATUS True" in done.stdout and "SAME" in done.stdout, done.stdout
    assert done.stderr.count("QSV native kernels:") == 1 and why in done.stderr, done.stderr


def test_planted_library_in_a_folder_writable_by_others_is_not_loaded(tmp_path):
    name = _expected_name()
    folder = tmp_path / "shared"
    folder.mkdir()
    os.chmod(folder, 0o777)
    _plant(folder, _planted_library(tmp_path), name)
    marker = tmp_path / "ran"
    done = _child({"QUEST_GEOMETRIC_CACHE": str(folder), "PLANTED_MARKER": str(marker)})
    _assert_rebuilt(done, marker, "writable by group or others")
    assert "private temporary folder" in done.stderr


def test_group_writable_folder_is_not_trusted_either(tmp_path):
    name = _expected_name()
    folder = tmp_path / "group"
    folder.mkdir()
    os.chmod(folder, 0o770)
    _plant(folder, _planted_library(tmp_path), name)
    marker = tmp_path / "ran"
    done = _child({"QUEST_GEOMETRIC_CACHE": str(folder), "PLANTED_MARKER": str(marker)})
    _assert_rebuilt(done, marker, "mode 0770")


@pytest.mark.skipif(os.getuid() != 0, reason="giving a file to another user needs root")
def test_library_owned_by_another_user_is_not_loaded(tmp_path):
    name = _expected_name()
    folder = tmp_path / "cache"
    folder.mkdir(mode=0o700)
    planted = _plant(folder, _planted_library(tmp_path), name)
    os.chown(planted, 12345, 12345)
    marker = tmp_path / "ran"
    done = _child({"QUEST_GEOMETRIC_CACHE": str(folder), "PLANTED_MARKER": str(marker)})
    _assert_rebuilt(done, marker, "owned by uid 12345")
    assert (folder / name).stat().st_uid == os.getuid()  # rebuilt in place


def test_symlinked_library_is_not_followed(tmp_path):
    name = _expected_name()
    folder = tmp_path / "cache"
    folder.mkdir(mode=0o700)
    _plant(folder, _planted_library(tmp_path), name, link=True)
    marker = tmp_path / "ran"
    done = _child({"QUEST_GEOMETRIC_CACHE": str(folder), "PLANTED_MARKER": str(marker)})
    _assert_rebuilt(done, marker, "cannot be opened as a plain file")
    assert not (folder / name).is_symlink()


def test_symlinked_cache_folder_is_not_trusted(tmp_path):
    name = _expected_name()
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    _plant(real, _planted_library(tmp_path), name)
    (tmp_path / "link").symlink_to(real)
    marker = tmp_path / "ran"
    done = _child({"QUEST_GEOMETRIC_CACHE": str(tmp_path / "link"),
                   "PLANTED_MARKER": str(marker)})
    _assert_rebuilt(done, marker, "symbolic link")


def test_truncated_library_is_rebuilt_not_mapped(tmp_path):
    folder = tmp_path / "cache"
    first = _child({"QUEST_GEOMETRIC_CACHE": str(folder)})
    assert first.returncode == 0 and "QSV native kernels" not in first.stderr, first.stderr
    (library,) = folder.glob("*.so")
    data = library.read_bytes()
    library.write_bytes(data[: len(data) // 2])
    done = _child({"QUEST_GEOMETRIC_CACHE": str(folder)})
    _assert_rebuilt(done, tmp_path / "never", "does not match the hash recorded")
    assert library.read_bytes() == data


def test_foreign_library_with_its_own_record_falls_back(tmp_path):
    """A library the user recorded themselves, without the kernels' symbols: loaded (the
    folder is the user's own), then refused with one warning; the layer runs its PyTorch
    path."""
    name = _expected_name()
    folder = tmp_path / "cache"
    folder.mkdir(mode=0o700)
    _plant(folder, _planted_library(tmp_path), name)
    done = _child({"QUEST_GEOMETRIC_CACHE": str(folder),
                   "PLANTED_MARKER": str(tmp_path / "ran")})
    assert done.returncode == 0, done.stderr
    assert "STATUS False" in done.stdout and "SAME" in done.stdout, done.stdout
    assert done.stderr.count("QSV native kernels:") == 1, done.stderr
    assert "not a library of these kernels" in done.stderr, done.stderr


def test_new_cache_folder_is_private_under_a_permissive_umask(tmp_path):
    folder = tmp_path / "new" / "cache"
    code = ("import os; os.umask(0o002); from quest_geometric.nn import _qsv_native as n; "
            "print(n.qsv_native_status()['available'])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, PYTHONPATH=str(ROOT),
                                                QUEST_GEOMETRIC_CACHE=str(folder)))
    assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr
    assert folder.stat().st_mode & 0o777 == 0o700
    assert "QSV native kernels" not in done.stderr


@pytest.mark.parametrize("variable", ["QUEST_GEOMETRIC_CACHE", "XDG_CACHE_HOME"])
def test_relative_cache_path_is_refused(tmp_path, variable):
    env = {"QUEST_GEOMETRIC_CACHE": None, variable: "relative/cache"}
    done = _child(env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "STATUS False" in done.stdout and "SAME" in done.stdout
    assert done.stderr.count("QSV native kernels:") == 1 and "relative path" in done.stderr
    assert not (tmp_path / "relative").exists()


def test_cc_is_a_command_line(tmp_path):
    """``CC='gcc -O0'`` builds with ``-O0`` (its own library name), not silently with cc."""
    if shutil.which("gcc") is None:
        pytest.skip("no gcc")
    done = _child({"QUEST_GEOMETRIC_CACHE": str(tmp_path), "CC": "gcc -O0"})
    assert done.returncode == 0 and "STATUS True" in done.stdout, done.stderr
    path = done.stdout.split("STATUS True ")[1].split()[0]
    expected = build._name([shutil.which("gcc"), "-O0"], build.FLAGS + build.OPENMP_FLAGS,
                           build.SOURCE.read_bytes())
    assert os.path.basename(path) == expected != _expected_name()


@pytest.mark.parametrize("cc, why", [("no-such-compiler-xyz", "names no program"),
                                     ("gcc '-O0", "not a command line")])
def test_bad_cc_is_refused_clearly(tmp_path, cc, why):
    done = _child({"QUEST_GEOMETRIC_CACHE": str(tmp_path), "CC": cc})
    assert done.returncode == 0, done.stderr
    assert "STATUS False" in done.stdout and "SAME" in done.stdout
    assert done.stderr.count("QSV native kernels:") == 1 and why in done.stderr, done.stderr
