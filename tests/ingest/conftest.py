from __future__ import annotations

from pathlib import Path

import pytest

from tests.rasters import CLASSES_CSV, write_labels, write_scene


@pytest.fixture(scope="session")
def rasters(tmp_path_factory) -> Path:
    """Two scenes (200×230 and 190×250 px, UTM 32N, nodata corner) with EPSG:3035 labels and a class table."""
    root = tmp_path_factory.mktemp("rasters")
    (root / "scenes").mkdir()
    (root / "labels").mkdir()
    for i, (h, w) in enumerate([(200, 230), (190, 250)]):
        scene = root / "scenes" / f"scene{i}.tif"
        classes = write_scene(scene, height=h, width=w, seed=i, origin=(310_000.0 + 4_000 * i, 5_650_000.0))
        write_labels(root / "labels" / f"scene{i}_lc.tif", scene, classes)
    (root / "classes.csv").write_text(CLASSES_CSV)
    return root
