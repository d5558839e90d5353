"""The documentation builds with warnings as errors, documents every public name, and the
code it shows runs."""
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
IN_CI = os.environ.get("CI", "").lower() == "true"

PUBLIC_MODULES = [
    "quest_geometric.quaternion",
    "quest_geometric.geometry",
    "quest_geometric.transforms",
    "quest_geometric.nn",
    "quest_geometric.experiments",
    "quest_geometric.typing",
    "quest_geometric.models",
    "quest_geometric.datasets",
    "quest_geometric.analysis",
    "quest_geometric.training",
    "quest_geometric.testing",
]


_CONSTANT_TYPES = (bool, dict, str, int, float, tuple, list)  # documented in their module


def _public_names():
    for modname in PUBLIC_MODULES:
        mod = importlib.import_module(modname)
        for name in getattr(mod, "__all__", []):
            yield modname, name, getattr(mod, name)


@pytest.mark.parametrize("modname,name,obj", list(_public_names()), ids=lambda v: str(v)[:40])
def test_public_name_has_docstring(modname, name, obj):
    if isinstance(obj, _CONSTANT_TYPES):
        return
    doc = getattr(obj, "__doc__", None)
    assert doc and doc.strip(), f"{modname}.{name} has no docstring"


@pytest.fixture(scope="module")
def built_docs(tmp_path_factory):
    if not IN_CI:
        pytest.importorskip("sphinx")
        pytest.importorskip("myst_parser")
        pytest.importorskip("furo")
    out = tmp_path_factory.mktemp("html")
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS), str(out)],
        capture_output=True, text=True, cwd=ROOT,
    )
    assert proc.returncode == 0, f"sphinx-build -W failed:\n{proc.stdout}\n{proc.stderr}"
    return out


def test_docs_build_strict(built_docs):
    assert (built_docs / "index.html").exists()


def test_every_public_name_is_in_the_api_reference(built_docs):
    html = "".join(p.read_text() for p in (built_docs / "api").glob("*.html"))
    missing = [
        f"{m}.{n}" for m, n, obj in _public_names()
        if not isinstance(obj, _CONSTANT_TYPES) and f'id="{m}.{n}"' not in html
    ]
    assert not missing, f"not in the API reference: {missing}"


def _python_blocks():
    for page in sorted(DOCS.glob("*.md")):
        for i, block in enumerate(re.findall(r"```python\n(.*?)```", page.read_text(), re.S)):
            yield pytest.param(block, id=f"{page.name}-{i}")


@pytest.mark.parametrize("code", list(_python_blocks()))
def test_docs_python_examples_run(code, tmp_path):
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
