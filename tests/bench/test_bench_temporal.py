"""`eoscale bench temporal`: a tiny real run (synth --dates, ingest --time-series --composite, a few steps of each
network, small forests) records the stack, every single date and the best of them, scored on the same val pixels,
all classes and the seasonal ones; bad options are one line."""

from __future__ import annotations

import json

import pytest

from eoscale.cli import main


@pytest.mark.slow
def test_bench_temporal_records_the_stack_against_every_single_date(tmp_path, capfd):
    assert main(["bench", "temporal", "--places", "3", "--dates", "4", "--size", "128", "--tile-size", "32",
                 "--composite", "93d", "--steps", "3", "--batch-size", "4", "--trees", "5",
                 "--pixels-per-class", "300", "--record", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "temporal.json").read_text())[-1]
    assert record["benchmark"] == "temporal" and record["machine"]["cores_available"] >= 1
    assert len(record["data"]["steps"]) == 4  # one calendar: a composite of 93 days a synthetic date
    results = record["results"]
    assert sorted(results["network_single"]) == sorted(results["forest_single"]) == ["0", "1", "2", "3"]
    pixels = results["network_stack"]["pixels"]
    assert pixels > 0 and all(r["pixels"] == pixels for r in [results["forest_stack"], *results["network_single"].values()])
    assert record["data"]["seasonal_classes"] == ["Winter cereal", "Maize", "Grassland (mown)", "Deciduous forest",
                                                  "Evergreen forest", "Seasonal wetland"]
    best = record["best_single_date"]["network"]
    assert results["network_single"][str(best)]["miou_seasonal"] == max(
        r["miou_seasonal"] for r in results["network_single"].values())
    assert record["seasonal_miou_gain_network"] == pytest.approx(
        results["network_stack"]["miou_seasonal"] - results["network_single"][str(best)]["miou_seasonal"])
    # the same network on one date: the same parameters, a cheaper step
    assert results["network_single"][str(best)]["parameters"] == results["network_stack"]["parameters"]
    assert results["network_stack"]["steps"] == 3
    seen = record["on_pixels_the_best_date_sees"]["network"]
    assert seen["date_step"] == best and 0 < seen["stack"]["pixels"] <= pixels
    out, err = capfd.readouterr()
    assert "seasonal-class val mIoU" in out
    # the bench's own lines, not Lightning's ("GPU available: False…", "`Trainer.fit` stopped…", the litlogger tip)
    assert "GPU available" not in out + err and "Trainer.fit" not in out + err and "litlogger" not in out + err


def test_bench_temporal_refuses_bad_options(capsys):
    assert main(["bench", "temporal", "--steps", "0", "--record", ""]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
