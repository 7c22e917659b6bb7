"""Synthetic but physically grounded Sentinel-2 L2A scenes with land-cover labels: eoscale's default data.

`synthesize(out_dir)` writes a set of scenes (GeoTIFFs in UTM 32N around Jülich), label rasters (ESA
WorldCover codes in EPSG:3035 at 20 m), the class table and a `manifest.json`; `eoscale synth` is its
command line. The modules, in the order the data is made:

- `landcover`: spatially coherent class maps (fields, forests, water, villages, roads) and their regions;
- `spectra`: class spectra as mixtures of earthlib's measured endmembers (and written-in water spectra);
- `render`: reflectance images with texture, boundary mixing, sensor blur, noise, clouds and nodata;
- `scene`: georeferencing and writing of scenes and labels;
- `safe`, `cog`, `landsat`, `stac`: the real product layouts (Sentinel-2 L2A SAFE, Sentinel-2 COGs, Landsat C2 L2) and their STAC Items;
- `phenology`, `season`: a season of dated scenes a place (`--dates`), classes whose spectra follow the year;
- `dataset`: the set on disk, its manifest, and `synthesize`.
"""

from eoscale.synth.dataset import LAYOUTS, SynthResult, class_table, synthesize

__all__ = ["LAYOUTS", "SynthResult", "class_table", "synthesize"]
