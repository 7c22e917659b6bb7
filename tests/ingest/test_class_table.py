"""Class tables whose colours are optional (issue 46, item 6): a table of `code,name` takes a default palette, as QGIS
gives classes colours of its own; a stated colour is kept and a bad one is still refused in one line."""

from __future__ import annotations

import json

import pytest

from eoscale.classes import TAB20, ClassTable, default_colour
from eoscale.errors import InputError


def test_a_csv_without_a_color_column_takes_the_default_palette(tmp_path):
    path = tmp_path / "classes.csv"
    path.write_text("code,name\n1,Water\n4,Forest\n5,Shrubland\n")
    table = ClassTable.load(path)  # refused before: "expected CSV with columns code,name,color"
    assert table.codes == [1, 4, 5] and table.names == ["Water", "Forest", "Shrubland"]
    assert [c.color for c in table.classes] == list(TAB20[:3])
    table.save(tmp_path / "saved.csv")  # written with its colours: the same table when read back
    assert ClassTable.load(tmp_path / "saved.csv") == table


def test_stated_and_missing_colours_mix_and_json_may_leave_them_out(tmp_path):
    path = tmp_path / "classes.csv"
    path.write_text("code,name,color\n1,Water,#476BA0\n2,Developed,\n3,Barren, #b2ada3 \n")
    assert [c.color for c in ClassTable.load(path).classes] == ["#476ba0", TAB20[1], "#b2ada3"]
    (tmp_path / "classes.json").write_text(json.dumps([{"code": 10, "name": "Trees"}, {"code": 20, "name": "Shrubs"}]))
    assert [c.color for c in ClassTable.load(tmp_path / "classes.json").classes] == list(TAB20[:2])


def test_the_palette_goes_on_past_twenty_classes_with_distinct_colours():
    colours = [default_colour(i) for i in range(60)]
    assert all(len(c) == 7 and c.startswith("#") for c in colours) and len(set(colours)) == 60


def test_a_bad_colour_or_a_missing_name_is_still_one_line(tmp_path):
    path = tmp_path / "classes.csv"
    path.write_text("code,name,color\n1,Water,blue\n")
    with pytest.raises(InputError, match=r"class 1 \(Water\): colour 'blue' is not '#rrggbb'"):
        ClassTable.load(path)
    path.write_text("code,color\n1,#476ba0\n")
    with pytest.raises(InputError, match="expected CSV with columns code,name and optionally color"):
        ClassTable.load(path)
