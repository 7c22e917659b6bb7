"""Reading scenes: find a scene's rasters, name their bands, and read windows on its reference grid.

Shared by `ingest` (which cuts scenes into a tile store) and `infer` (which maps them), so that neither
stage imports the other. Nothing here writes.
"""
