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


def test_the_real_scene_and_fewshot_records_have_their_tables():
    # guards: learning_scene.json and fewshot.json recorded with no table in the README (issue 49/50, item 3)
    names = {m["name"] for m in BLOCK.finditer(README.read_text())}
    assert {"learning-scene-zion", "learning-scene-nc", "fewshot"} <= names


def test_the_pretraining_gain_is_a_row_of_its_own(tmp_path):
    # guards: a --pretrain record whose gain over the network from scratch is not shown, or shown with another sign
    from eoscale.bench import readme_scenes
    from eoscale.bench.readme import Records, table

    models = ("pixel_forest", "means_forest", "forest", "network", "stack", "stack_means", "network_pretrained")
    summary = {m: {"miou_mean": 0.2, "miou_std": 0.01, "accuracy_mean": 0.6} for m in models}
    summary["network_pretrained"]["miou_mean"] = 0.17
    record = {"date": "2026-12-07T19:00:00+0000", "label": "vit", "seeds": [0, 1, 2], "summary": summary,
              "minutes": 4.0, "pretrain_minutes": 2.0,
              "pretraining_gain": {"miou_mean": -0.03, "miou_std": 0.005, "each": [-0.03, -0.035, -0.025]}}
    (tmp_path / "learning_scene.json").write_text(json.dumps([record]))
    lines = table(*readme_scenes.learning_scene(["2026-12-07T19:00"])(Records(tmp_path)))
    assert any("pretraining gain** (2 of 4 min)" in line and "**-0.030 ± 0.005**" in line for line in lines)
    assert any("network from the scene-pretrained encoder" in line and "-0.030 |" in line for line in lines)
