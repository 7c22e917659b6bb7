"""Descriptions of eoscale's outputs for others to read: STAC Items for maps, STAC Collections for tile stores,
and the digests (file sha256, store fingerprint) that lineage is checked against."""
