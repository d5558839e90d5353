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
    "quest_geometric.adapters",
    "quest_geometric.geometry",
    "quest_geometric.transforms",
    "quest_geometric.nn",
    "quest_geometric.nn.focus.decode",
    "quest_geometric.profile",
    "quest_geometric.pipelines.qsv_digits",
    "quest_geometric.pipelines.qk_geometry",
    "quest_geometric.pipelines.focus",
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


def build_docs(tmp_path_factory):
    """Build the HTML docs once per test session (shared with tests/test_docs_browser.py)."""
    if not IN_CI:
        pytest.importorskip("sphinx")
        pytest.importorskip("myst_parser")
        pytest.importorskip("furo")
        pytest.importorskip("sphinx-mathjax-offline")
    out = tmp_path_factory.getbasetemp() / "docs_html"
    done = out / ".built"
    if done.exists():
        return out
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS),
         str(out)],
        capture_output=True, text=True, cwd=ROOT,
    )
    assert proc.returncode == 0, f"sphinx-build -W failed:\n{proc.stdout}\n{proc.stderr}"
    done.write_text("ok\n")
    return out


@pytest.mark.slow
def test_docs_build_strict(built_docs):
    assert (built_docs / "index.html").exists()


@pytest.mark.slow
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
@pytest.mark.slow
def test_docs_python_examples_run(code, tmp_path):
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr


def _bench_tables():
    sys.path.insert(0, str(DOCS / "_scripts"))
    try:
        return importlib.import_module("bench_tables")
    finally:
        sys.path.pop(0)


def test_benchmark_tables_are_cut_to_key_columns(tmp_path):
    """A hand-made wide table keeps its key columns in order, drops an all-n/a one, and
    links the CSV; a narrow table is left alone."""
    bt = _bench_tables()
    (tmp_path / "focus_speed.csv").write_text("x\n")
    wide = ("### T\n\n| tokens | junk | speedup_blocks | full_mb | rounds |\n"
            "|---|---|---|---|---|\n"
            "| 1 | x | 2.5 | n/a | 3 |\n| 2 | y | 3.5 | n/a | 3 |\n\nnotes\n")
    out = bt.narrow_markdown(wide, tmp_path / "focus_speed", "../r/").splitlines()
    assert out[2:6] == ["| tokens | rounds | speedup_blocks |", "|---|---|---|",
                        "| 1 | 3 | 2.5 |", "| 2 | 3 | 3.5 |"]
    assert "focus_speed.csv <../r/focus_speed.csv>" in out[7]
    assert "3 of 5" in out[7] and out[-1] == "notes"
    narrow = "## T\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n![plot](p.png)\n"
    assert bt.narrow_markdown(narrow, tmp_path / "x", "../r/").splitlines() == [
        "### T", "", "| a | b |", "|---|---|", "| 1 | 2 |", "", "![plot](../r/p.png)"]
    with pytest.raises(FileNotFoundError, match="no CSV"):
        bt.narrow_markdown(wide, tmp_path / "absent", "../r/")


def test_focus_lm_table_is_cut_to_its_key_columns():
    bt = _bench_tables()
    base = ROOT / "benchmarks" / "focus" / "results" / "focus_lm"
    out = bt.narrow_markdown(base.with_suffix(".md").read_text(), base, "../r/").splitlines()
    assert out[2] == ("| model | gate | mode | top_k | val_bpc | vs full (%) | balance | "
                      "pair_fraction |")
    assert any(line.startswith("Key columns (8 of 11)") for line in out)


@pytest.mark.slow
def test_benchmarks_page_navigation_and_width(built_docs):
    """Included result files add no top-level sections: the page's sections are exactly its
    own '##' headings; every table fits (at most 11 columns) and the cut ones link a CSV."""
    src = (DOCS / "benchmarks.md").read_text()
    own = re.findall(r"^## (.+)$", src, re.M)
    html = (built_docs / "benchmarks.html").read_text()
    body = html[html.index('<article'):html.index('</article>')]
    sections = re.findall(r'<h2>(.*?)<a class="headerlink"', body)
    unescape = __import__("html").unescape
    assert [unescape(s) for s in sections] == [s.replace("'", "\u2019") for s in own]
    for table in re.findall(r"<table.*?</table>", body, re.S):
        header = re.search(r"<thead>(.*?)</thead>", table, re.S).group(1)
        assert header.count("<th") <= 11, header
    assert body.count('class="reference download internal"') >= 8
