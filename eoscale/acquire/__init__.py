"""Acquisition: from an area and a season at a STAC API to files the compute nodes read offline.

`eoscale search` asks the API once and writes a frozen item list (`frozen`, `search`); `eoscale stage` downloads the
assets the sensors need into a cache (`stage`, `cache`) through downloads that survive the faults users hit
(`fetch`, `retry`: 429 and 5xx, timeouts, stalled and truncated answers, wrong checksums; `signing`: Planetary
Computer-style signed hrefs); `ingest --items` and `predict --items` then read the staged Items through the STAC
reader (`eoscale.raster.formats.stac`), so a map is made from a catalog exactly as its training data was.

This package reads STAC and writes the cache; ingest and infer import it, it imports neither (nor train).
"""
