"""The package's layering, read from the source with :mod:`ast` (docs/architecture.md).

(a) No private name (leading underscore, in the imported names or the module path) is
    imported from another subpackage; ``quest_geometric._utils`` is the shared private home
    (its names carry no underscore).
(b) Each subpackage imports only the subpackages :data:`ALLOWED` lists for it (every
    subpackage has a row, and the rows form no cycle: a strict order of layers).
(c) No import cycle between the package's modules.

Every import statement counts, including those inside functions.
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "quest_geometric"

_BASE = frozenset({"_utils", "typing"})
#: importer -> the subpackages (and top-level modules) it may import, besides itself and the
#: package root (``from quest_geometric import __version__``). Read bottom to top.
ALLOWED: dict[str, frozenset[str]] = {
    "_utils": frozenset(),  # the bottom: nothing else of the package
    "typing": frozenset({"_utils"}),
    "quaternion": _BASE,
    "geometry": _BASE,
    "transforms": _BASE | {"geometry"},
    "datasets": _BASE | {"geometry", "transforms"},
    "adapters": _BASE,
    "nn": _BASE | {"quaternion", "adapters", "geometry"},
    "analysis": _BASE | {"quaternion", "adapters", "geometry", "transforms", "datasets"},
    "models": _BASE | {"quaternion", "adapters", "geometry", "nn"},
    # the training loop, and the training of Focus routers (which needs nn.focus)
    "training": _BASE | {"adapters", "nn"},
    "profile": _BASE,  # timing, memory and result writing: generic
    "testing": _BASE | {"quaternion", "adapters", "geometry", "transforms", "nn"},
    # what the tour runs: any layer below
    "pipelines": _BASE | {"quaternion", "geometry", "transforms", "datasets", "adapters", "nn",
                          "analysis", "models", "training", "profile"},
    "tour": _BASE | {"quaternion", "geometry", "transforms", "datasets", "adapters", "nn",
                     "analysis", "models", "training", "profile", "pipelines"},
    "__main__": _BASE | {"tour"},
}


def subpackage(path: Path, root: Path = PACKAGE) -> str:
    """``nn`` for ``quest_geometric/nn/focus/router.py``, ``tour`` for ``tour.py``."""
    first = path.relative_to(root).parts[0]
    return first[:-3] if first.endswith(".py") else first


def package_imports(source: str, package: str = "quest_geometric"
                    ) -> tuple[tuple[int, str, tuple[str, ...]], ...]:
    """``(line, module, names)`` for every absolute import of ``package...``."""
    return _package_imports(source, package)  # one cache key however it is called


@functools.lru_cache(maxsize=None)  # each file is parsed once for every check
def _package_imports(source: str, package: str) -> tuple[tuple[int, str, tuple[str, ...]], ...]:
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            if node.level:  # relative imports are not used in this package; refuse them here
                raise AssertionError(f"line {node.lineno}: relative import")
            if node.module and (node.module == package
                                or node.module.startswith(package + ".")):
                out.append((node.lineno, node.module, tuple(a.name for a in node.names)))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name, ()) for a in node.names
                    if a.name == package or a.name.startswith(package + ".")]
    return tuple(sorted(out))


def _target(module: str, names: tuple[str, ...]) -> list[str]:
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
    """Imports of a subpackage that :data:`ALLOWED` does not list for ``importer``."""
    bad = []
    allowed = ALLOWED.get(importer, frozenset())
    for line, module, names in package_imports(source):
        for tgt in _target(module, names):
            if tgt == importer or tgt == "(root)" and importer != "_utils":
                continue
            if tgt not in allowed:
                bad.append(f"line {line}: {importer} may not import {tgt} ({module})")
    return bad


def module_name(path: Path, root: Path) -> str:
    """``pkg.nn.focus`` for ``pkg/nn/focus/__init__.py``, ``pkg.tour`` for ``pkg/tour.py``."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (``from a.b import c`` reaches ``a.b.c``
    when that is a module, else ``a.b``), for every ``.py`` file under ``root``."""
    files = {module_name(p, root): p for p in root.rglob("*.py")
             if "__pycache__" not in p.parts}
    graph = {}
    for name, path in files.items():
        out = set()
        for _, module, names in package_imports(path.read_text(encoding="utf-8"), root.name):
            subs = {f"{module}.{n}" for n in names} & files.keys()
            out |= subs if subs else {module}
        graph[name] = {m for m in out if m in files and m != name}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (each an import cycle),
    sorted: Tarjan's algorithm, iterative."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            nxt = next((w for w in edges if w not in index or w in on_stack), None)
            if nxt is not None and nxt not in index:
                index[nxt] = low[nxt] = len(index)
                stack.append(nxt)
                on_stack.add(nxt)
                work.append((nxt, iter(sorted(graph[nxt]))))
            elif nxt is not None:
                low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while not comp or comp[-1] != node:
                        comp.append(stack.pop())
                        on_stack.discard(comp[-1])
                    if len(comp) > 1:
                        cycles.append(sorted(comp))
    return sorted(cycles)


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


# ---------------------------------------------------------------------- the checkers
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
        "line 3: transforms may not import nn (quest_geometric.nn._checks)",
        "line 4: transforms may not import nn (quest_geometric)",
        "line 6: transforms may not import models (quest_geometric.models.qsv_net)",
    ]
    assert layering_violations(src, "pipelines") == []
    assert len(layering_violations(src, "_utils")) == 4  # every import but _utils itself
    assert layering_violations("from quest_geometric.nn.focus import x\n", "training") == []
    assert layering_violations("from quest_geometric.models import x\n", "training") == [
        "line 1: training may not import models (quest_geometric.models)"]
    assert layering_violations("from quest_geometric.pipelines import x\n", "models") == [
        "line 1: models may not import pipelines (quest_geometric.pipelines)"]
    assert subpackage(PACKAGE / "nn" / "focus" / "router.py") == "nn"
    assert subpackage(PACKAGE / "tour.py") == "tour"


def _write_package(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_cycle_check_finds_a_cycle_through_a_function_level_import(tmp_path):
    pkg = _write_package(tmp_path / "toy", {
        "__init__.py": "",
        "a.py": "from toy.b import g\n",
        "b.py": "def g():\n    from toy import c\n",
        "c.py": "import toy.a\n",
        "sub/__init__.py": "from toy.sub.leaf import x\n",
        "sub/leaf.py": "from toy.a import f\nx = 1\n",
        "d.py": "from toy.sub import leaf\n",  # reaches the module toy.sub.leaf
    })
    graph = import_graph(pkg)
    assert graph["toy.d"] == {"toy.sub.leaf"} and graph["toy.sub"] == {"toy.sub.leaf"}
    assert import_cycles(graph) == [["toy.a", "toy.b", "toy.c"]]
    (pkg / "c.py").write_text("x = 1\n")  # break it: no cycle left
    assert import_cycles(import_graph(pkg)) == []
    # two separate cycles, one of two modules
    assert import_cycles({"p": {"q"}, "q": {"p"}, "r": {"s"}, "s": {"t"}, "t": {"r"},
                          "u": {"p"}}) == [["p", "q"], ["r", "s", "t"]]


def test_the_allowed_layers_form_no_cycle():
    graph = {k: set(v) for k, v in ALLOWED.items()}
    assert import_cycles(graph) == [] and all(k not in v for k, v in ALLOWED.items())


def test_checker_sees_the_package():
    files = _files()
    assert PACKAGE / "nn" / "qsv_conv.py" in files and PACKAGE / "tour.py" in files
    lines = package_imports((PACKAGE / "transforms" / "image_to_lattice.py").read_text())
    assert any(m == "quest_geometric.geometry.graphs" for _, m, _ in lines)


# ---------------------------------------------------------------------- the package
def test_every_subpackage_has_a_rule():
    found = {subpackage(p) for p in _files()} - {"__init__"}
    assert found == set(ALLOWED), (sorted(found - set(ALLOWED)), sorted(set(ALLOWED) - found))


def test_no_private_name_imported_across_subpackages():
    bad = _report(private_imports)
    assert not bad, "private names imported from another subpackage:\n" + "\n".join(bad)


def test_layering():
    bad = _report(layering_violations)
    assert not bad, "layering violations (docs/architecture.md):\n" + "\n".join(bad)


@pytest.mark.parametrize("root", [PACKAGE, PACKAGE.parent / "benchmarks"],
                         ids=["quest_geometric", "benchmarks"])
def test_no_import_cycle(root):
    cycles = import_cycles(import_graph(root))
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


@pytest.mark.parametrize("importer", sorted(ALLOWED))
def test_every_rule_names_a_real_subpackage(importer):
    for name in {importer, *ALLOWED[importer]}:
        assert (PACKAGE / name).is_dir() or (PACKAGE / f"{name}.py").is_file(), name


def test_the_map_names_every_subpackage_and_every_nn_file():
    """docs/architecture.md, the package map, has a row for every subpackage and top-level
    module and names every file of ``nn/`` (a new or renamed file fails until the map says
    where it is)."""
    text = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = [name for name in ALLOWED
               if f"`{name}/`" not in text and f"`{name}.py`" not in text]
    nn_files = [p for p in (PACKAGE / "nn").rglob("*.py")
                if p.name != "__init__.py" and "__pycache__" not in p.parts]
    missing += [str(p.relative_to(PACKAGE)) for p in nn_files if p.name not in text]
    assert not missing, f"docs/architecture.md does not name: {missing}"
