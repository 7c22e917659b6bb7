"""The data tests' store: `tests.stores.make_store` (the one every folder's tests use), two 200×230 px scenes
cut into 16 px tiles, 8 tiles per shard, the first scene's labels on its own grid (so that they equal the
classes its pixels encode, `tests.rasters.class_of_pixels`), the second's in EPSG:3035 at 20 m."""

from __future__ import annotations

import pytest

from eoscale.bands import SENTINEL2_NAMES
from tests.stores import make_store

BANDS = list(SENTINEL2_NAMES)


@pytest.fixture(scope="session")
def store(tmp_path_factory) -> str:
    """Two scenes of 200×230 px cut into 16 px tiles, 8 tiles per shard."""
    return str(make_store(tmp_path_factory.mktemp("data-store"), height=200, width=230, tile_size=16,
                          split=(0.6, 0.2, 0.2), own_grid_labels=True))


@pytest.fixture(scope="session")
def season(tmp_path_factory) -> str:
    """The same scenes as `store`, as a season of 3 dates a tile (`tests.time_stores`: clouds, a masked date)."""
    from tests.time_stores import make_time_store

    return str(make_time_store(tmp_path_factory.mktemp("data-season"), steps=3, height=200, width=230, tile_size=16,
                               split=(0.6, 0.2, 0.2), own_grid_labels=True))


@pytest.fixture(scope="session")
def sensor_store(tmp_path_factory) -> str:
    """`store`'s scenes at 32 px tiles as a store of two sensors, 8 + 2 bands, each with its own gaps (the first
    group's rows 0-7 and the second's columns 0-5 of every tile: `tests.stores.make_sensor_store`)."""
    from tests.stores import make_sensor_store

    return str(make_sensor_store(tmp_path_factory.mktemp("data-sensors"), split=(0.6, 0.2, 0.2)))
