"""The change-area example of Olofsson et al. (2014), "Good practices for estimating area and assessing accuracy of
land change", Remote Sensing of Environment 148:42–57, section 5 (doi:10.1016/j.rse.2014.02.015), run end to end:
two forest/non-forest maps → `eoscale change` (strata: deforestation, forest gain, stable forest, stable non-forest,
the paper's map areas in 30 m pixels, scaled 1:1000 in pixels and ×1000 in pixel area so the hectares are the
paper's) → a labelled sample of the paper's Table 8 → `eoscale assess`.

Published figures asserted (to the paper's precision): error-adjusted area of deforestation 21,158 ± 6,158 ha
(235,086 ± 68,418 pixels), forest gain 11,686 ± 3,756 ha, stable forest 285,770 ± 15,510 ha, stable non-forest
581,386 ± 16,282 ha; user's accuracy of deforestation 0.88 ± 0.07, producer's 0.75 ± 0.21; overall 0.95 ± 0.02.
Source of the numbers: the paper's section 5 as reproduced by `mapaccuracy::olofsson` (H. Costa; its example is
the same matrix, https://rdrr.io/github/hagc/mapaccuracy/man/olofsson.html) and pinned independently in
tests/maps/test_estimate.py, which checks the estimator alone against Tables 8 and 9.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from pyproj import Transformer

from eoscale.classes import ClassTable, LandCoverClass
from eoscale.cli import main
from tests.maps.maps import write_map

FOREST, NON_FOREST = 1, 2
TABLE = ClassTable((LandCoverClass(FOREST, "Forest", "#006400"), LandCoverClass(NON_FOREST, "Non-forest", "#ffbb22")))
# change codes (i·C + j + 1, C = 2): forest → forest 1, forest → non-forest 2, non-forest → forest 3, non-forest → non-forest 4
DEFORESTATION, GAIN, STABLE_FOREST, STABLE_NON_FOREST = 2, 3, 1, 4
ORDER = [DEFORESTATION, GAIN, STABLE_FOREST, STABLE_NON_FOREST]  # the paper's row order
PIXELS = [200, 150, 3_200, 6_450]  # the paper's 200,000 / 150,000 / 3,200,000 / 6,450,000 pixels ÷ 1000
TABLE_8 = np.array([[66, 0, 5, 4],  # rows: map stratum, columns: reference class, in ORDER
                    [0, 55, 8, 12],
                    [1, 0, 153, 11],
                    [2, 1, 9, 313]])
PIXEL = math.sqrt(1000 * 900.0)  # metres: one pixel here is 1000 of the paper's 30 m pixels


@pytest.fixture(scope="module")
def assessed(tmp_path_factory):
    folder = tmp_path_factory.mktemp("olofsson")
    stratum = np.repeat(ORDER, PIXELS).reshape(100, 100)
    source = {DEFORESTATION: FOREST, GAIN: NON_FOREST, STABLE_FOREST: FOREST, STABLE_NON_FOREST: NON_FOREST}
    target = {DEFORESTATION: NON_FOREST, GAIN: FOREST, STABLE_FOREST: FOREST, STABLE_NON_FOREST: NON_FOREST}
    before = np.vectorize(source.get)(stratum).astype(np.uint8)
    after = np.vectorize(target.get)(stratum).astype(np.uint8)
    origin = (300_000.0, 5_700_000.0)
    a = write_map(folder / "2000_landcover.tif", before, table=TABLE, resolution=PIXEL, origin=origin)
    b = write_map(folder / "2010_landcover.tif", after, table=TABLE, resolution=PIXEL, origin=origin)
    assert main(["change", str(a), str(b), "--output", str(folder / "change")]) == 0

    rows, cols, labels = [], [], []
    for i, code in enumerate(ORDER):  # the paper's sample: n_ij units of map stratum i labelled j
        where = np.argwhere(stratum == code)
        units = np.repeat(ORDER, TABLE_8[i])
        rows += where[: len(units), 0].tolist()
        cols += where[: len(units), 1].tolist()
        labels += units.tolist()
    x = origin[0] + (np.array(cols) + 0.5) * PIXEL
    y = origin[1] - (np.array(rows) + 0.5) * PIXEL
    lon, lat = Transformer.from_crs("EPSG:32632", "EPSG:4326", always_xy=True).transform(x, y)
    pd.DataFrame({"lon": lon, "lat": lat, "reference": labels}).to_csv(folder / "sample.csv", index=False)
    assert main(["assess", str(folder / "change" / "change.tif"), "--reference", str(folder / "sample.csv"),
                 "--output", str(folder / "assessment"), "--no-tracking"]) == 0
    report = json.loads((folder / "assessment" / "assessment.json").read_text())
    return report, {c["code"]: c for c in report["classes"]}


def test_the_strata_are_the_papers(assessed):
    report, by_code = assessed
    assert report["error_matrix"]["counts"] == TABLE_8[np.argsort(ORDER)][:, np.argsort(ORDER)].tolist()
    assert [round(by_code[c]["mapped_area_ha"]) for c in ORDER] == [18_000, 13_500, 288_000, 580_500]
    assert by_code[DEFORESTATION]["name"] == "Forest → Non-forest"


def test_the_published_change_areas_and_their_95_percent_intervals(assessed):
    _, by_code = assessed
    assert [round(by_code[c]["area_ha"]) for c in ORDER] == [21_158, 11_686, 285_770, 581_386]
    assert [round(by_code[c]["area_ha_ci95"]) for c in ORDER] == [6_158, 3_756, 15_510, 16_282]
    deforestation = by_code[DEFORESTATION]
    assert round(deforestation["area_ha"] / 0.09) == 235_086  # in the paper's 30 m pixels
    assert round(deforestation["area_ha_ci95"] / 0.09) == 68_418


def test_the_published_accuracies(assessed):
    report, by_code = assessed
    deforestation = by_code[DEFORESTATION]
    assert round(deforestation["users_accuracy"], 2) == 0.88 and round(deforestation["users_accuracy_ci95"], 2) == 0.07
    assert round(deforestation["producers_accuracy"], 2) == 0.75
    assert round(deforestation["producers_accuracy_ci95"], 2) == 0.21
    assert round(report["overall_accuracy"]["estimate"], 2) == 0.95
    assert round(report["overall_accuracy"]["ci95"], 2) == 0.02
