"""benchmarks/README.md's tables are generated from the records and agree with them (issue 45, item 4)."""

from __future__ import annotations

import json
import re
import shutil

from eoscale.bench.readme import BLOCK, README, main, render


def test_the_readme_tables_agree_with_the_records():
    # guards: a table edited by hand, or a record changed without regenerating (python -m eoscale.bench.readme)
    text = README.read_text()
    assert len(BLOCK.findall(text)) >= 15
    assert render(text, README.parent) == text


def test_every_table_of_the_readme_is_generated():
    # guards: a hand-written table (a figure with no record behind it) added outside the generated blocks
    outside = BLOCK.sub("", README.read_text())
    rows = [line for line in outside.splitlines() if line.startswith("|")]
    assert rows == []


def test_a_changed_record_makes_the_check_fail(tmp_path, capsys):
    # guards: a check that passes whatever the records say
    for path in README.parent.glob("*.json"):
        shutil.copy(path, tmp_path / path.name)
    readme = tmp_path / "README.md"
    shutil.copy(README, readme)
    assert main(["--check", "--readme", str(readme)]) == 0
    runs = json.loads((tmp_path / "serve.json").read_text())
    runs[-1]["server"]["windows_per_s"] = 99.9
    (tmp_path / "serve.json").write_text(json.dumps(runs))
    assert main(["--check", "--readme", str(readme)]) == 1
    assert "disagree with the records" in capsys.readouterr().err
    assert main(["--readme", str(readme)]) == 0
    assert re.search(r"\| server, batch 16 \| 99\.9 windows/s", readme.read_text())


def test_under_each_table_its_records_command_and_commit(tmp_path):
    # guards: a generated table that does not say which record (and, once records carry it, which code) it shows
    for path in README.parent.glob("*.json"):
        shutil.copy(path, tmp_path / path.name)
    runs = json.loads((tmp_path / "serve.json").read_text())
    runs[-1]["provenance"] = {"command": "eoscale bench serve --repeats 5", "commit": "0123456789abcdef", "dirty": True}
    (tmp_path / "serve.json").write_text(json.dumps(runs))
    text = render(README.read_text(), tmp_path)
    assert ("Record: `serve.json` 2026-12-04T22:13:36+0000: `eoscale bench serve --repeats 5` at 0123456789 (dirty)."
            in text)
