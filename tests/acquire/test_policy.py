"""The pieces of a download without a server: the retry policy's waits, multihash checksums, the frozen list's
forms, which assets an Item needs."""

from __future__ import annotations

import email.utils
import hashlib
import time

import pystac
import pytest

from eoscale.acquire import checksum
from eoscale.acquire.cache import asset_file, needed_assets
from eoscale.acquire.frozen import read_list, write_list
from eoscale.acquire.retry import RetryPolicy, parse_retry_after
from eoscale.errors import InputError, OutputExistsError


def test_retry_after_is_honoured_in_seconds_and_as_a_date():
    """guards: a server's Retry-After ignored for the backoff (a 429 storm made worse)"""
    policy = RetryPolicy(backoff=0.01, max_delay=60)
    assert policy.delay(1, "7") == 7.0
    date = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 28 <= policy.delay(1, date) <= 30
    assert RetryPolicy(max_delay=5).delay(1, "120") == 5.0  # capped
    assert parse_retry_after("soon") is None


def test_backoff_doubles_with_jitter_up_to_its_cap():
    policy = RetryPolicy(backoff=1.0, max_delay=8.0)
    for attempt, ceiling in ((1, 1.0), (2, 2.0), (3, 4.0), (6, 8.0)):
        assert all(ceiling / 2 <= policy.delay(attempt) <= ceiling for _ in range(50))


def test_multihash_checksums_as_stac_writes_them():
    """guards: file:checksum read as a bare digest (its 0x12 0x20 prefix taken for hash bytes)"""
    digest = hashlib.sha256(b"scene").digest()
    assert checksum.parse("1220" + digest.hex()) == (0x12, digest)
    assert checksum.multihash(0x12, digest) == "1220" + digest.hex()
    md5 = hashlib.md5(b"scene").digest()
    assert checksum.parse(checksum.multihash(0xD5, md5)) == (0xD5, md5)
    with pytest.raises(ValueError, match="0x99"):
        checksum.parse("9901" + "00")
    with pytest.raises(ValueError, match="digest of 2 bytes"):
        checksum.parse("1220abcd")


def _item(item_id: str, assets: dict[str, dict], platform: str | None = "sentinel-2b") -> pystac.Item:
    item = pystac.Item(item_id, {"type": "Point", "coordinates": [6, 51]}, [6, 51, 6, 51],
                       pystac.utils.str_to_datetime("2024-06-01T10:00:00Z"),
                       {"platform": platform} if platform else {}, collection="c")
    for key, extra in assets.items():
        item.add_asset(key, pystac.Asset(f"https://archive/{item_id}/{key}.tif", media_type=pystac.MediaType.COG,
                                         roles=["data"], extra_fields=extra))
    return item


def test_needed_assets_are_the_sensors_bands_and_mask():
    """guards: staging an Item's every asset (JPEG 2000 duplicates, previews) or missing its cloud mask"""
    earth_search = _item("es", {"red": {}, "nir": {}, "scl": {}, "red-jp2": {"eo:bands": [{"name": "red"}]},
                                "aot": {}, "visual": {}})
    assert needed_assets(earth_search) == ["red", "nir", "scl"]
    planetary = _item("pc", {"B04": {}, "B08": {}, "SCL": {}, "visual": {}, "AOT": {}})
    assert needed_assets(planetary) == ["B04", "B08", "SCL"]
    sentinel1 = _item("s1", {"vv": {}, "vh": {}, "thumbnail": {}}, platform="sentinel-1a")
    assert needed_assets(sentinel1) == ["vv", "vh"]
    assert needed_assets(earth_search, ["RED", "scl", "B8A"]) == ["red", "scl"]
    with pytest.raises(InputError, match="'es' has none of the assets"):
        needed_assets(earth_search, ["vv"])
    assert asset_file("B04", planetary.assets["B04"]) == "B04.tif"


@pytest.mark.parametrize("suffix", [".json", ".parquet"])
def test_frozen_list_round_trip(tmp_path, suffix):
    """guards: a list whose Items or search record change on the way through the file"""
    items = [_item(f"i{n}", {"red": {"file:size": 10 + n}}) for n in range(3)]
    path = write_list(items, tmp_path / f"l{suffix}", {"api": "http://x", "matched": 3})
    again, search = read_list(path)
    assert [i.id for i in again] == ["i0", "i1", "i2"] and search["matched"] == 3
    assert again[2].assets["red"].extra_fields["file:size"] == 12
    assert again[0].assets["red"].href == "https://archive/i0/red.tif"
    with pytest.raises(OutputExistsError):
        write_list(items, path, {})
    with pytest.raises(InputError, match="name it .json"):
        write_list(items, tmp_path / "l.csv", {})
