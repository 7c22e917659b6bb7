"""The "values" output writer (`eoscale.infer.outputs.values`) and the contract's values details: the summary
merged from parts matches the whole, percentiles within a bin, `activate` undoes the target normalisation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from eoscale.contract import BandContract
from eoscale.infer.outputs import ValueWriter, writer_for
from eoscale.infer.outputs.values import HISTOGRAM_BINS, ValueSummary

INFO = {"name": "tree_height", "units": "m", "mean": 10.0, "std": 4.0, "min": 0.0, "max": 30.0}


def _contract(**kw) -> BandContract:
    return BandContract(("B02",), (0.0,), (1.0,), 32, (), **kw)


def test_the_values_contract_has_one_channel_and_undoes_the_normalisation():
    contract = _contract(target="values", target_info=INFO)
    assert contract.output_channels() == 1 and writer_for(contract) is ValueWriter
    logits = torch.tensor([[[[0.0, 1.0], [-2.5, 0.5]]]])
    assert contract.activate(logits).tolist() == [[[[10.0, 14.0], [0.0, 12.0]]]]
    assert BandContract.from_dict(contract.to_dict()) == contract


def test_a_classes_contract_records_no_target_details():
    contract = BandContract(("B02",), (0.0,), (1.0,), 32, ({"code": 1, "name": "a", "color": "#000000"},))
    assert "target_info" not in contract.to_dict() and contract.target_info is None


def test_parts_summaries_merge_into_the_whole_scenes():
    rng = np.random.default_rng(0)
    values = rng.gamma(2.0, 5.0, 100_000).astype(np.float32)
    whole = ValueSummary(-15.0, 45.0)
    whole.add(values)
    merged = ValueSummary(-15.0, 45.0)
    for part in np.array_split(values, 7):
        piece = ValueSummary(-15.0, 45.0)
        piece.add(np.append(part, np.nan))  # NaN never counts
        merged.merge(piece.state())
    a = whole.table(scene="s", name="h", units="m")
    b = merged.table(scene="s", name="h", units="m")
    assert a["valid_pixels"] == b["valid_pixels"] == values.size
    assert a["percentiles"] == b["percentiles"] and a["histogram"]["counts"] == b["histogram"]["counts"]
    assert b["mean"] == pytest.approx(float(values.mean()), rel=1e-6)
    assert b["std"] == pytest.approx(float(values.std()), rel=1e-4)
    assert (b["min"], b["max"]) == (float(values.min()), float(values.max()))
    width = 60.0 / HISTOGRAM_BINS
    for q in (1, 5, 25, 50, 75, 95, 99):
        assert abs(b["percentiles"][f"p{q:02d}"] - np.percentile(values, q)) <= width
    # values beyond the histogram's range count below/above it, and the percentiles stay within min..max
    assert a["histogram"]["above"] == int((values >= 45.0).sum())
    assert b["percentiles"]["p99"] <= b["max"]
    assert "mean" in ValueWriter.describe(b)


def test_an_empty_scene_has_an_empty_summary():
    table = ValueSummary(0.0, 1.0).table(scene="s", name="h", units=None)
    assert table["valid_pixels"] == 0 and table["mean"] is None
    assert ValueWriter.describe(table) == "no valid pixel"
