"""Label codes of any sign and size (issue 13, fault 11)."""

from __future__ import annotations

import numpy as np

from eoscale.classes import IGNORE_INDEX, ClassTable
from eoscale.ingest.labels import class_indices
from tests.rasters import CLASSES_CSV


def test_negative_and_huge_codes_are_unmapped_not_classes(tmp_path):
    (tmp_path / "classes.csv").write_text(CLASSES_CSV)
    table = ClassTable.load(tmp_path / "classes.csv")
    codes = np.array([table.codes[0], -91, 2**40, table.codes[-1], 256 + table.codes[0]], dtype=np.int64)
    got = class_indices(codes, table)
    # -91 used to wrap around a lookup table into a class; 2**40 used to allocate a terabyte-long table
    assert got.tolist() == [0, IGNORE_INDEX, IGNORE_INDEX, len(table.codes) - 1, IGNORE_INDEX]
    assert got.dtype == np.uint8
