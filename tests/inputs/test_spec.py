"""The input spec (`eoscale.inputs.spec`): plain data both ways; inferred for a store or checkpoint written before it
was recorded (their channel groups exactly as they were read then); recorded in a new contract; what predict refuses
of it; and serve's presence rule taking the spec's nodata, not 0."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

from eoscale.bands import SENTINEL2_NAMES
from eoscale.contract import BandContract
from eoscale.errors import InputError
from eoscale.infer.predict import check_scenes
from eoscale.inputs.prepare import prepare, presence_from_nodata
from eoscale.inputs.spec import InputSpec, SensorInput, Timeline
from eoscale.sensors.groups import groups_of
from eoscale.serve.landcover import ServedModel
from eoscale.store import schema
from eoscale.store.open import read_store_attrs
from tests.checkpoints import TABLE
from tests.store.conftest import V1_STORE

RADAR = ("VV", "VH")
SENSORS = ({"name": "sentinel-2", "bands": list(SENTINEL2_NAMES)}, {"name": "sentinel-1", "bands": list(RADAR)})
BANDS = (*SENTINEL2_NAMES, *RADAR)


def _fused_contract(**spec) -> BandContract:
    return BandContract(BANDS, tuple([1500.0] * 10 + [9000.0, 8400.0]), tuple([1000.0] * 10 + [400.0, 400.0]), 32,
                        tuple(TABLE.to_records()), sensor="sentinel-2", sensors=SENSORS, **spec)


def test_a_spec_is_plain_data_both_ways():
    spec = InputSpec(sensors=(SensorInput("sentinel-2", tuple(SENTINEL2_NAMES), Timeline("calendar", 6, 16, "median",
                                                                                         "2024-03-01")),
                              SensorInput("sentinel-1", RADAR, Timeline("dates", 6), "nodata")),
                     static=("ELEVATION", "SLOPE", "ASPECT_SIN", "ASPECT_COS"), tile_size=64,
                     mean=tuple(float(i) for i in range(16)), std=tuple(1.0 + i for i in range(16)), nodata=65535.0,
                     crs="EPSG:32632", resolution=10.0)
    assert InputSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    assert spec.time_steps == 6 and spec.composite.interval == 16
    assert [(g.name, g.start, g.stop) for g in spec.groups()] == [("sentinel-2", 0, 10), ("sentinel-1", 10, 12),
                                                                  ("copdem", 12, 16)]
    assert "mean" not in spec.to_dict(statistics=False)  # a store's statistics live in its own attribute


def test_an_old_store_gets_the_spec_its_attributes_imply():
    attrs = read_store_attrs(V1_STORE)  # written before specs (and dates) were recorded
    spec = InputSpec.from_store_attrs(attrs)
    assert spec.bands == tuple(attrs[schema.ATTR_BANDS]) and spec.time_steps == 1 and spec.composite is None
    assert spec.groups() == groups_of(attrs.get(schema.ATTR_SENSORS), attrs[schema.ATTR_BANDS],
                                      attrs[schema.ATTR_SENSOR])
    assert spec.nodata == attrs[schema.ATTR_NODATA] and spec.mean == tuple(attrs[schema.ATTR_STATISTICS]["mean"])
    # a season composited at ingest: its calendar (what predict must not apply to raw scenes)
    composited = {**attrs, schema.ATTR_TIME_STEPS: 4, schema.ATTR_INGEST: {"time_series": {"composite": 16}}}
    timeline = InputSpec.from_store_attrs(composited).composite
    assert (timeline.kind, timeline.steps, timeline.interval, timeline.reducer) == ("calendar", 4, 16, "median")
    # a recorded spec wins over what the attributes imply, with the store's own statistics and nodata joined (the
    # attributes the pixels were written with)
    recorded = {**attrs, "input_spec": spec.to_dict(statistics=False) | {"presence": "group_nodata", "nodata": 7.0}}
    assert InputSpec.from_store_attrs(recorded).nodata == attrs[schema.ATTR_NODATA]
    assert InputSpec.from_store_attrs(recorded).std == tuple(attrs[schema.ATTR_STATISTICS]["std"])
    # a store whose sensors attribute was edited after ingest disagrees with its spec: refused, not half-believed
    edited = {**recorded, schema.ATTR_SENSORS: [{"name": "sentinel-2", "bands": list(spec.bands[:2])},
                                                {"name": "sentinel-1", "bands": list(spec.bands[2:])}]}
    with pytest.raises(InputError, match="edited after ingest; ingest it again"):
        InputSpec.from_store_attrs(edited)


def test_an_old_checkpoint_gets_the_groups_it_was_read_with_and_a_new_one_keeps_its_spec():
    old = _fused_contract().to_dict()
    assert "input_spec" not in old  # as every checkpoint written before
    contract = BandContract.from_dict(old)
    spec = contract.spec()
    assert spec.groups() == contract.sensor_groups() and spec.nodata == 0.0  # what serve assumed for those
    assert spec.mean == contract.mean and spec.std == contract.std
    recorded = _fused_contract(input_spec=spec.to_dict() | {"nodata": 65535.0})
    again = BandContract.from_dict(json.loads(json.dumps(recorded.to_dict())))
    assert again.spec().nodata == 65535.0 and again.spec().groups() == contract.sensor_groups()


def test_serve_reads_a_sensor_absent_where_its_bands_are_at_the_specs_nodata():
    """Guards serve's old rule, a group absent where its bands are 0: with a store nodata of 65535 the radar's gap
    went to the network as (65535 - mean) / std."""
    contract = _fused_contract(input_spec=_fused_contract().spec().to_dict() | {"nodata": 65535.0})
    served = ServedModel("fused", nn.Conv2d(1, 1, 1), contract, {})
    windows = np.full((1, 12, 32, 32), 2000, np.uint16)
    windows[:, 10:, :8] = 65535  # no radar in the top rows
    windows[:, :10, :, :4] = 65535  # no optical data in the left columns
    x = served.normalise(windows, None)
    assert (x[:, 10:, :8] == 0).all() and (x[:, :10, :, :4] == 0).all()
    assert (x[:, :10, :8, 4:] != 0).all() and (x[:, 10:, 8:, :4] != 0).all()  # each group's gap is its own
    # the loader's rule on the same pixels: the same tensor
    spec = contract.spec()
    t = torch.from_numpy(windows).float()
    assert torch.equal(prepare(spec, t.clone(), presence=presence_from_nodata(spec, t)), torch.from_numpy(x))


def test_a_composite_checkpoint_tells_predict_its_interval_and_is_not_refused():
    """predict composites a composite checkpoint's raw scenes onto its intervals (`eoscale.raster.fused_season`,
    bit-identical to ingest's: tests/infer/test_composite_predict.py) from the interval its spec records."""
    from eoscale.infer.stacked import trained_composite

    old = BandContract(tuple(SENTINEL2_NAMES), (1.0,) * 10, (1.0,) * 10, 32, tuple(TABLE.to_records()), time_steps=4)
    composite = InputSpec(sensors=(SensorInput("sentinel-2", tuple(SENTINEL2_NAMES), Timeline("calendar", 4, 16,
                                                                                             "median")),), tile_size=32)
    contract = BandContract(tuple(SENTINEL2_NAMES), (1.0,) * 10, (1.0,) * 10, 32, tuple(TABLE.to_records()),
                            time_steps=4, input_spec=composite.to_dict())
    assert trained_composite(contract) == 16 and trained_composite(old) is None  # an old one: its scenes' own dates
    check_scenes(contract, [], what="checkpoint 'season.ckpt'")  # no refusal: predict composites
