"""The README is a user's page: short, its Python quick start runs, and its test command is
the one CI runs."""
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", README, re.S | re.M)


def _needs(code: str) -> list[str]:
    """The optional packages a block imports (its extra may not be installed)."""
    return [m for m in ("transformers", "sklearn") if re.search(rf"^from {m}\b|^import {m}\b",
                                                                  code, re.M)]


def test_readme_is_short_and_has_a_python_quick_start():
    assert len(README.splitlines()) <= 250
    blocks = _blocks("python")
    assert len(blocks) == 3
    assert "QSVConv" in blocks[0] and "DataLoader" in blocks[0]
    assert all(n in blocks[1] for n in ("compose_focus", "generate", "save_routers",
                                        "load_routers"))
    assert "QKProbe" in blocks[2]


def test_readme_test_command_is_the_one_ci_runs():
    """The second set-up command is, character for character, the last line of .ci/run."""
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1]
    bash = [b.strip() for b in _blocks("bash")]
    assert bash[1] == ci
    assert "ruff check ." in ci and "python -m pytest" in ci
    assert bash[0].endswith("python -m quest_geometric tour")


@pytest.mark.slow
@pytest.mark.parametrize("index", range(3), ids=["qsvconv", "compose_focus", "qk_probe"])
def test_readme_python_block_runs(index, tmp_path):
    code = _blocks("python")[index]
    for module in _needs(code):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed")
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=tmp_path, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip()


def test_readme_links_resolve():
    """Every relative link of the README names a file or folder of the repository."""
    targets = re.findall(r"\]\((?![a-z]+:)([^)#]+)", README)
    assert len(targets) > 10
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert not missing, missing
