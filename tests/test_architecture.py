"""ARCHITECTURE.md against the code: every path it names exists, and each row of "Where a change goes" names a
test that exists (the stub sensor, format, output writer and strategy tests add one of each without touching
any eoscale file)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "ARCHITECTURE.md").read_text()
PATH = re.compile(r"`((?:eoscale|configs|tests)/[^`\s]*)`")


def _section(title: str) -> str:
    start = DOC.index(f"## {title}")
    end = DOC.find("\n## ", start + 1)
    return DOC[start : end if end > 0 else None]


def _exists(path: str) -> bool:
    """A named path, or for a pattern such as `eoscale/sensors/<name>.py` or `eoscale/raster/{safe,stac}.py`, the
    folder it goes in."""
    path = path.split("::")[0]  # a test's node id: its file
    if "<" in path:
        return (ROOT / path.split("<")[0]).parent.is_dir() if not path.split("<")[0].endswith("/") \
            else (ROOT / path.split("<")[0]).is_dir()
    if "*" in path:
        return any(ROOT.glob(path))
    if "{" in path:
        head, names, tail = re.match(r"(.*)\{(.*)\}(.*)", path).groups()
        return all((ROOT / f"{head}{name}{tail}").exists() for name in names.split(","))
    return (ROOT / path.rstrip("/")).exists()


def test_every_path_the_document_names_exists():
    missing = sorted({p for p in PATH.findall(DOC) if not _exists(p)})
    assert not missing, f"ARCHITECTURE.md names paths that do not exist: {missing}"


def test_each_kind_of_change_names_its_files_and_a_test():
    rows = [line for line in _section("Where a change goes").splitlines() if line.startswith("| a new")]
    kinds = {row.split("|")[1].strip() for row in rows}
    assert {"a new sensor", "a new product format", "a new output format for a target kind", "a new target kind",
            "a new strategy"} <= kinds
    for row in rows:
        _, change, files, held_by, _ = row.split("|")
        assert PATH.findall(files), f"{change.strip()}: no files named"
        tests = PATH.findall(held_by)
        assert tests and all((ROOT / t).is_file() for t in tests), f"{change.strip()}: its test {tests} is missing"


def test_the_stub_tests_register_their_piece_in_the_test_itself():
    """The stubs touch no eoscale file: each registers its piece from the test."""
    for test, call in [("tests/sensors/test_stub_sensor.py", "register_sensor"),
                       ("tests/raster/test_formats.py", "register_format"),
                       ("tests/infer/test_output_writers.py", "register_writer"),
                       ("tests/train/test_stub_strategy.py", "PlainParallelism")]:
        assert call in (ROOT / test).read_text(), f"{test} does not use {call}"
