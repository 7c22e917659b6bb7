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
    {"raster", "contract", "cluster", "catalog"},
    {"sensors"},  # the sensor registry: band identity is (sensor, band)
    {"schema", "bands"},  # the ground: names every stage shares
    {"classes"},
    {"errors", "__init__"},
]
# imports within one layer that are part of the design (MLflow lives in track; stages log through it)
SIDEWAYS = {("infer", "track"), ("train", "track"), ("maps", "track"), ("serve", "track"), ("__main__", "cli")}


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
    (fake / "models" / "__init__.py").write_text("def f():\n    from eoscale.train.task import X\n")
    monkeypatch.setattr(__import__(__name__, fromlist=["ROOT"]), "ROOT", fake)
    assert ("models", "train") in {(s, d) for s, d, _ in imports()}
