"""The package's layering, read from the source with :mod:`ast` (docs/architecture.md).

(a) No private name (leading underscore, in the imported names or the module path) is
    imported from another subpackage; ``quest_geometric._utils`` is the shared private home
    (its names carry no underscore).
(b) Lower layers never import higher ones (the table in docs/architecture.md).

Every import statement counts, including those inside functions.
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "quest_geometric"

#: importer -> the subpackages it must not import.
FORBIDDEN: dict[str, frozenset[str]] = {
    "_utils": frozenset({"*"}),  # the bottom: nothing else of the package
    "geometry": frozenset({"nn", "models", "pipelines"}),
    "transforms": frozenset({"nn", "models", "pipelines"}),
    "adapters": frozenset({"nn", "analysis"}),
    "nn": frozenset({"models", "analysis", "pipelines"}),
}
#: the top: only these may import them.
TOP: dict[str, frozenset[str]] = {
    "pipelines": frozenset({"pipelines", "tour", "__main__"}),
    "tour": frozenset({"tour", "__main__"}),
}


def subpackage(path: Path, root: Path = PACKAGE) -> str:
    """``nn`` for ``quest_geometric/nn/focus/router.py``, ``tour`` for ``tour.py``."""
    first = path.relative_to(root).parts[0]
    return first[:-3] if first.endswith(".py") else first


@functools.lru_cache(maxsize=None)  # each file is parsed once for both checks
def package_imports(source: str) -> tuple[tuple[int, str, list[str]], ...]:
    """``(line, module, names)`` for every absolute import of ``quest_geometric...``."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            if node.level:  # relative imports are not used in this package; refuse them here
                raise AssertionError(f"line {node.lineno}: relative import")
            if node.module and (node.module == "quest_geometric"
                                or node.module.startswith("quest_geometric.")):
                out.append((node.lineno, node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name, []) for a in node.names
                    if a.name == "quest_geometric" or a.name.startswith("quest_geometric.")]
    return tuple(sorted(out))


def _target(module: str, names: list[str]) -> list[str]:
    """The subpackages an import reaches: ``from quest_geometric import nn`` reaches ``nn``."""
    parts = module.split(".")
    if len(parts) > 1:
        return [parts[1]]
    return [n for n in names if (PACKAGE / n).is_dir()
            or (PACKAGE / f"{n}.py").is_file()] or ["(root)"]


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_imports(source: str, importer: str) -> list[str]:
    """Imports of a private name or module from another subpackage than ``importer``."""
    bad = []
    for line, module, names in package_imports(source):
        parts = module.split(".")
        for tgt in _target(module, names):
            if tgt in (importer, "_utils"):
                continue
            private = [p for p in parts[1:] if _private(p)] + [n for n in names if _private(n)]
            if private:
                bad.append(f"line {line}: from {module} import {', '.join(names)} "
                           f"({', '.join(private)})")
    return bad


def layering_violations(source: str, importer: str) -> list[str]:
    """Imports that break :data:`FORBIDDEN` or :data:`TOP` for a file of ``importer``."""
    bad = []
    forbidden = FORBIDDEN.get(importer, frozenset())
    for line, module, names in package_imports(source):
        for tgt in _target(module, names):
            if tgt == importer or tgt == "(root)" and importer != "_utils":
                continue
            if "*" in forbidden or tgt in forbidden:
                bad.append(f"line {line}: {importer}/ imports {tgt}/ ({module})")
            elif tgt in TOP and importer not in TOP[tgt]:
                bad.append(f"line {line}: {importer} imports the top layer {tgt} ({module})")
    return bad


def _files() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def _report(check) -> list[str]:
    out = []
    for path in _files():
        if path == PACKAGE / "__init__.py":  # the package facade re-exports its subpackages
            continue
        for msg in check(path.read_text(encoding="utf-8"), subpackage(path)):
            out.append(f"{path.relative_to(PACKAGE.parent)} {msg}")
    return out


# ---------------------------------------------------------------------- the checker itself
def test_checker_finds_what_it_should():
    src = ("from quest_geometric.geometry.knn import _check_k, knn_graph\n"
           "def f():\n    from quest_geometric.nn._checks import check_qkv\n"
           "from quest_geometric import __version__, nn\n"
           "from quest_geometric._utils import check_int\n"
           "import quest_geometric.models.qsv_net\n")
    assert private_imports(src, "transforms") == [
        "line 1: from quest_geometric.geometry.knn import _check_k, knn_graph (_check_k)",
        "line 3: from quest_geometric.nn._checks import check_qkv (_checks)",
    ]
    assert private_imports(src,
                           "geometry") == ["line 3: from quest_geometric.nn._checks import "
                                           "check_qkv (_checks)"]
    assert layering_violations(src, "transforms") == [
        "line 3: transforms/ imports nn/ (quest_geometric.nn._checks)",
        "line 4: transforms/ imports nn/ (quest_geometric)",
        "line 6: transforms/ imports models/ (quest_geometric.models.qsv_net)",
    ]
    assert layering_violations(src, "analysis") == []
    assert len(layering_violations(src, "_utils")) == 4  # every import but _utils itself
    assert layering_violations("from quest_geometric.pipelines.common import x\n", "models") == [
        "line 1: models imports the top layer pipelines (quest_geometric.pipelines.common)"]
    assert layering_violations("from quest_geometric.pipelines.common import x\n", "tour") == []
    assert subpackage(PACKAGE / "nn" / "focus" / "router.py") == "nn"
    assert subpackage(PACKAGE / "tour.py") == "tour"


def test_checker_sees_the_package():
    files = _files()
    assert PACKAGE / "nn" / "qsv_conv.py" in files and PACKAGE / "tour.py" in files
    lines = package_imports((PACKAGE / "transforms" / "image_to_lattice.py").read_text())
    assert any(m == "quest_geometric.geometry.graphs" for _, m, _ in lines)


# ---------------------------------------------------------------------- the package
def test_no_private_name_imported_across_subpackages():
    bad = _report(private_imports)
    assert not bad, "private names imported from another subpackage:\n" + "\n".join(bad)


def test_layering():
    bad = _report(layering_violations)
    assert not bad, "layering violations (docs/architecture.md):\n" + "\n".join(bad)


@pytest.mark.parametrize("importer", sorted(FORBIDDEN))
def test_every_rule_names_a_real_subpackage(importer):
    for name in {importer, *FORBIDDEN[importer], *TOP} - {"*"}:
        assert (PACKAGE / name).is_dir() or (PACKAGE / f"{name}.py").is_file(), name
