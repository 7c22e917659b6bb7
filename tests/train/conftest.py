"""The training tests' stores, as fixtures over `tests.stores.make_store`."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.stores import make_store


@pytest.fixture(scope="session")
def store(tmp_path_factory) -> Path:
    return make_store(tmp_path_factory.mktemp("store"))


@pytest.fixture(scope="session")
def other_store(tmp_path_factory) -> Path:
    """A store of the same shape whose band contract differs (other band names)."""
    names = [f"X{i}" for i in range(10)]
    return make_store(tmp_path_factory.mktemp("other"), band_names=names)


@pytest.fixture(scope="session")
def sensor_store(tmp_path_factory) -> Path:
    """`store`'s scenes as a store of two sensors (8 + 2 bands, each with its own gaps: `tests.stores.make_sensor_store`)."""
    from tests.stores import make_sensor_store

    return make_sensor_store(tmp_path_factory.mktemp("sensor-store"))
