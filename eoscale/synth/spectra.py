"""Surface reflectance spectra of the land-cover classes, at the 10 Sentinel-2 L2A bands eoscale uses.

Vegetation, non-photosynthetic vegetation (NPV), soil and urban materials come from the measured and
modelled endmember library of `earthlib` (earth-chris/earthlib, MIT; `earthlib.full_library`): PROSAIL
canopy spectra, the ICRAF-ISRIC global soil spectral library, and field-spectrometer (ASD) spectra of bark,
litter, roofs and pavements, all at 10 nm from 400 to 2450 nm. They are resampled here to our band centres and widths
(`eoscale.bands.SENTINEL2_L2A`) with earthlib's Gaussian band resampler; it reads files shipped inside the
package and needs neither network nor Earth Engine.

Water has no earthlib spectrum, so it is written below. Every class is a linear mixture of endmembers
(the model of spectral mixture analysis), and each region (a field, a forest stand) draws its own
endmember spectra and its own fractions: that is the within-class variability.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from eoscale.bands import SENTINEL2_L2A

# Surface reflectance of inland water at B02..B12, two end states that each water region mixes.
# Water absorbs strongly beyond 700 nm (pure-water absorption rises from ~0.6 m^-1 at 700 nm to >2 m^-1 at
# 750 nm and far more in the SWIR; Pope & Fry 1997, Appl. Opt. 36, 8710; Kou et al. 1993, Appl. Opt. 32,
# 3531), so red-edge, NIR and SWIR reflectance is near zero and what remains comes from suspended matter.
# The visible levels are representative values chosen within the ranges that Sentinel-2 MSI matchups over
# lakes and rivers report (Pahlevan et al. 2017, Remote Sens. Environ. 201, 47-56): a clear lake with a
# green maximum of ~3 %, and a turbid, eutrophic river with a green-red plateau of ~7 % and some NIR
# backscatter from sediment.
WATER_CLEAR = (0.030, 0.034, 0.018, 0.012, 0.006, 0.005, 0.004, 0.003, 0.001, 0.001)
WATER_TURBID = (0.045, 0.072, 0.068, 0.060, 0.032, 0.026, 0.022, 0.018, 0.006, 0.004)

# Endmember kinds, in the order of the fraction vectors below. "shade" is photometric shade (zero
# reflectance): the canopy shadow of trees and buildings, as in spectral mixture analysis.
KINDS: tuple[str, ...] = ("vegetation", "npv", "soil", "roof", "pavement", "water", "shade")


@dataclass(frozen=True)
class ClassMixture:
    """How a class mixes endmembers: Dirichlet concentrations per kind, and which vegetation it uses.

    The Dirichlet mean is a class's typical composition; a smaller total concentration means more
    variability from region to region (cropland, whose fields range from bare soil to full canopy).
    `lai` limits the PROSAIL canopies drawn (leaf area index); `soil_brightness` darkens soils (moist
    or organic soils of wetlands are darker); `texture` is the relative amplitude of within-region
    brightness texture and `vigour` that of within-region vegetation-cover texture.
    """

    concentration: dict[str, float]
    lai: tuple[float, float] = (0.0, 10.0)
    soil_brightness: tuple[float, float] = (0.8, 1.0)
    texture: float = 0.05
    vigour: float = 0.05


# WorldCover code -> mixture. Tree cover and shrubland overlap (shrubs are a sparser, more mixed canopy),
# as do grassland and cropland (a crop field in full leaf looks like a meadow), as in real imagery.
CLASS_MIXTURES: dict[int, ClassMixture] = {
    10: ClassMixture({"vegetation": 9.0, "npv": 0.8, "soil": 0.2, "shade": 3.5}, lai=(3.5, 10.0), texture=0.10, vigour=0.03),
    20: ClassMixture({"vegetation": 6.0, "npv": 1.8, "soil": 1.0, "shade": 1.5}, lai=(1.5, 6.0), texture=0.10, vigour=0.08),
    30: ClassMixture({"vegetation": 8.0, "npv": 1.5, "soil": 0.6, "shade": 0.3}, lai=(1.5, 6.0), texture=0.04, vigour=0.06),
    40: ClassMixture({"vegetation": 1.6, "npv": 0.5, "soil": 1.1, "shade": 0.1}, lai=(0.5, 8.0), texture=0.04, vigour=0.08),
    50: ClassMixture({"roof": 3.0, "pavement": 3.0, "vegetation": 1.0, "soil": 0.3, "shade": 1.2}, texture=0.18, vigour=0.04),
    60: ClassMixture({"soil": 10.0, "npv": 0.6, "vegetation": 0.3, "pavement": 0.3}, soil_brightness=(0.75, 1.05), texture=0.06, vigour=0.03),
    80: ClassMixture({"water": 40.0, "vegetation": 0.4}, lai=(1.0, 4.0), texture=0.03, vigour=0.0),
    90: ClassMixture(
        {"vegetation": 5.0, "npv": 2.0, "water": 2.5, "soil": 0.6, "shade": 0.5},
        lai=(1.0, 5.0), soil_brightness=(0.45, 0.7), texture=0.10, vigour=0.08,
    ),
}


@dataclass(frozen=True)
class EndmemberLibrary:
    """Endmember spectra per kind, each (n_spectra, n_bands) float32 reflectance, and the canopies' LAI."""

    spectra: dict[str, np.ndarray]
    vegetation_lai: np.ndarray

    def mean(self, kind: str) -> np.ndarray:
        return self.spectra[kind].mean(axis=0)


@lru_cache(maxsize=1)
def endmember_library() -> EndmemberLibrary:
    """The earthlib endmembers resampled to `SENTINEL2_L2A`, grouped by kind (loaded once per process)."""
    import earthlib  # pandas and a 5 MB library: imported on first use, so `eoscale --help` stays fast
    from earthlib.sensors import Sensor

    bands = SENTINEL2_L2A
    sensor = Sensor(
        name="eoscale-Sentinel2-L2A",
        band_names=[b.name for b in bands],
        band_centers=[b.wavelength_nm / 1000 for b in bands],
        band_widths=[b.bandwidth_nm / 1000 for b in bands],
        wavelength_unit="micrometers",
    )
    library = earthlib.full_library
    data = library.to_sensor(sensor).data.astype(np.float32)
    meta = library.metadata
    level2, level3 = meta["LEVEL_2"].to_numpy(), meta["LEVEL_3"].to_numpy()
    red = data[:, 2]

    vegetation = level2 == "vegetation"
    # Temperate agricultural soils (loess Luvisols here): drop the very dark and the desert-bright samples.
    soil = (level2 == "bare") & (level3 == "soil") & (red > 0.08) & (red < 0.35) & (data[:, 0] < red)
    spectra = {
        "vegetation": data[vegetation],
        "npv": data[level2 == "npv"],
        "soil": data[soil],
        "roof": data[(level2 == "built") & np.isin(level3, ["tile", "comp_shingle", "concrete_tile", "metal", "wood_shingle"])],
        "pavement": data[(level2 == "built") & np.isin(level3, ["asphalt", "road", "parking_lot", "sidewalk", "gravel"])],
        "water": np.array([WATER_CLEAR, WATER_TURBID], np.float32),
        "shade": np.zeros((1, len(bands)), np.float32),
    }
    names = meta["NAME"].to_numpy()[vegetation]
    lai = np.array([_lai(name) for name in names], np.float32)
    return EndmemberLibrary(spectra=spectra, vegetation_lai=lai)


def region_spectra(codes: tuple[int, ...], n_regions: int, rng: np.random.Generator) -> np.ndarray:
    """Spectra (n_classes, n_regions, n_bands) float32: what region r looks like if it holds class codes[c].

    Every (class, region) pair draws its own endmember spectra and fractions, so two fields of the same
    class differ, and so do two stands of one forest.
    """
    library = endmember_library()
    out = np.empty((len(codes), n_regions, len(SENTINEL2_L2A)), np.float32)
    for c, code in enumerate(codes):
        mixture = CLASS_MIXTURES[code]
        kinds = list(mixture.concentration)
        fractions = rng.dirichlet([mixture.concentration[k] for k in kinds], size=n_regions).astype(np.float32)
        spectrum = np.zeros((n_regions, out.shape[2]), np.float32)
        for k, kind in enumerate(kinds):
            spectrum += fractions[:, k : k + 1] * _draw(library, kind, mixture, n_regions, rng)
        out[c] = spectrum
    return out


def _draw(library: EndmemberLibrary, kind: str, mixture: ClassMixture, n: int, rng: np.random.Generator) -> np.ndarray:
    """`n` endmember spectra of `kind` for a class: canopies within its LAI range, soils darkened, waters mixed."""
    pool = library.spectra[kind]
    if kind == "water":
        turbidity = rng.beta(1.5, 2.5, size=(n, 1)).astype(np.float32)
        return (1 - turbidity) * pool[0] + turbidity * pool[1]
    if kind == "vegetation":
        low, high = mixture.lai
        eligible = np.flatnonzero((library.vegetation_lai >= low) & (library.vegetation_lai <= high))
        pool = pool[eligible] if eligible.size else pool
    spectra = pool[rng.integers(len(pool), size=n)]
    if kind == "soil":
        spectra = spectra * rng.uniform(*mixture.soil_brightness, size=(n, 1)).astype(np.float32)
    return spectra


def _lai(name: str) -> float:
    """Leaf area index from an earthlib PROSAIL spectrum name like 'v-LAI-3.9-LMA-0.011-CHL-11.5-N-2.0'."""
    match = re.search(r"LAI-([0-9.]+)", name)
    return float(match.group(1)) if match else 3.0
