"""The layers of ARCHITECTURE.md, enforced: each package of `eoscale` imports only packages below it.

Read from the source with `ast` (every import, also those inside functions), so a lazy import that runs
the wrong way fails here too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "eoscale"

# top to bottom; a package may import the packages of the layers below its own
LAYERS: list[set[str]] = [
    {"__main__", "cli", "bench"},
    {"infer", "train", "track", "slurm", "maps", "serve"},
    {"models", "data", "ingest", "synth"},
    {"raster", "contract", "cluster", "catalog", "acquire"},
    {"inputs"},  # the input spec and the one preparation of a window (eoscale/inputs)
    {"sensors"},  # the sensor registry: band identity is (sensor, band)
    {"store", "schema", "bands"},  # the ground: the store's format (eoscale.schema re-exports eoscale.store.schema)
    {"classes"},
    {"_compat"},  # every private-API use of torch, Lightning, DeepSpeed, Ray, zarr, PyTriton (eoscale/_compat)
    {"paths"},  # the command line's file options, their globs expanded (eoscale/paths.py)
    {"errors", "__init__"},
]
# imports within one layer that are part of the design (MLflow lives in track; stages log through it)
SIDEWAYS = {("schema", "store"), ("infer", "track"), ("train", "track"), ("maps", "track"), ("serve", "track"), ("__main__", "cli")}


def layer_of(package: str) -> int:
    for depth, layer in enumerate(LAYERS):
        if package in layer:
            return depth
    raise AssertionError(f"package eoscale.{package} is in no layer: add it to LAYERS here and to ARCHITECTURE.md")


def imports() -> list[tuple[str, str, str]]:
    """(importing package, imported package, where) for every `eoscale.*` import in the source tree."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        package = parts[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module] if node.module != "eoscale" else [f"eoscale.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            else:
                continue
            for module in modules:
                if module.startswith("eoscale."):
                    target = module.split(".")[1]
                    target = "__init__" if target == "__version__" else target
                    if target != package:
                        found.append((package, target, f"{path.relative_to(ROOT.parent)}:{node.lineno}"))
    return found


def test_every_package_is_in_a_layer():
    packages = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    packages |= {p.stem for p in ROOT.glob("*.py")}
    for package in packages:
        layer_of(package)


@pytest.mark.parametrize("package", sorted(set().union(*LAYERS)))
def test_imports_run_downward(package):
    wrong = [
        f"{where}: eoscale.{src} imports eoscale.{dst}"
        for src, dst, where in imports()
        if src == package and layer_of(dst) <= layer_of(src) and (src, dst) not in SIDEWAYS
    ]
    assert not wrong, "imports against the layers (ARCHITECTURE.md):\n" + "\n".join(wrong)


def test_the_named_rules_of_the_issue_hold():
    edges = {(src, dst) for src, dst, _ in imports()}
    for lower in ("infer", "data", "models", "ingest"):
        assert (lower, "train") not in edges
    assert ("infer", "ingest") not in edges
    assert ("infer", "serve") not in edges and ("serve", "infer") not in edges  # the client is eoscale.infer.remote
    assert ("data", "ingest") not in edges and ("ingest", "data") not in edges
    assert ("models", "data") not in edges


def test_the_check_sees_a_wrong_import(tmp_path, monkeypatch):
    """The checker itself: a lazy upward import inside a function is found."""
    fake = tmp_path / "eoscale"
    (fake / "models").mkdir(parents=True)
    (fake / "models" / "__init__.py").write_text("def f():\n    from eoscale.train.tasks.segmentation import X\n")
    monkeypatch.setattr(__import__(__name__, fromlist=["ROOT"]), "ROOT", fake)
    assert ("models", "train") in {(s, d) for s, d, _ in imports()}


def module_graph(root: Path = None) -> dict[str, set[str]]:
    """Module -> the eoscale modules it imports (lazy imports inside functions included; relative imports resolved)."""
    root = ROOT if root is None else root
    modules: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = ("eoscale",) + path.relative_to(root).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        found: set[str] = set()
        tree = ast.parse(path.read_text(), str(path))
        # imports only a type checker runs (`if TYPE_CHECKING:`) make no circle at run time
        typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If) and _is_type_checking(block.test)
                       for stmt in block.body for n in ast.walk(stmt)}
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.ImportFrom):
                base = ".".join(here[: len(here) - node.level + 1] + ([node.module] if node.module else [])) \
                    if node.level else (node.module or "")
                targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            found |= {t for t in targets if t in modules and t != name}
        graph[name] = found
    return graph


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def circles_inside_packages(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles whose modules all lie in one package of eoscale (strongly connected components)."""
    def package(module: str) -> str:
        return module.split(".")[1] if module.count(".") else ""

    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if package(w) != package(v):
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return circles


def test_no_import_circle_inside_a_package():
    circles = circles_inside_packages(module_graph())
    assert not circles, "import circles inside a package (move the shared piece into a module both import):\n" + \
        "\n".join(" <-> ".join(c) for c in circles)


def test_the_circle_check_sees_a_circle(tmp_path):
    fake = tmp_path / "eoscale"
    (fake / "train").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "train" / "__init__.py").write_text("")
    (fake / "train" / "a.py").write_text("from eoscale.train.b import x\n")
    (fake / "train" / "b.py").write_text("def f():\n    from . import a\n")
    (fake / "train" / "c.py").write_text("from eoscale.train import a\n")
    (fake / "train" / "d.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from eoscale.train.c import y\n")
    (fake / "train" / "e.py").write_text("from eoscale.train.d import z\n")
    assert circles_inside_packages(module_graph(fake)) == [["eoscale.train.a", "eoscale.train.b"]]
