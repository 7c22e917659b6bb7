"""Phenology of the season's classes: what each land cover is made of on each day of the year.

A pixel's reflectance on a date is a linear mixture of its region's endmember spectra (`eoscale.synth.spectra`: earthlib
canopies, dry vegetation, soils, roofs, pavements, water, and shade), and in a season the *fractions* change: a winter
cereal field is green from March, yellow in June, stubble after its harvest in late July and bare soil after
ploughing; maize is bare until May, green from July to September; a meadow is green all year but for its mowing; a
deciduous stand loses its leaves, an evergreen one does not; a seasonal wetland is flooded in winter and a marsh in
summer. Each class's year is a calendar of surface *states* (shared compositions such as `CANOPY` or `STUBBLE`), held
on plateaus and changed linearly between them.

Because states are shared, two classes in the same state on a date are drawn from the same distribution that day:
they cannot be told apart from that date alone, only from the season. On the calendars below:

- winter cereal and grassland are both `CANOPY` from day 100 to 145 (spring); they differ after the cereal's harvest;
- maize and grassland are both `CANOPY` from day 200 to 205 and 240 to 255 (summer, around the meadow's second cut);
  maize is bare soil in spring, as the ploughed cereal field is in early autumn;
- deciduous and evergreen forest are both `FOREST` from day 135 to 265 (summer); they differ from November to April.

Regions (fields, forest stands) shift the whole calendar by a few days (`PHASE_JITTER_DAYS`), as sowing and
mowing dates vary from farm to farm; plateaus are longer than twice the jitter, so the identities hold inside them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from eoscale.classes import ClassTable, LandCoverClass
from eoscale.synth.spectra import KINDS

# season class codes (the label rasters' values) and their table: the WorldCover classes near Jülich split by
# how they change through the year
WINTER_CEREAL, MAIZE, GRASSLAND, DECIDUOUS, EVERGREEN, WETLAND, WATER, BUILT, BARE, SHRUB = range(1, 11)
SEASON_CLASSES = ClassTable((
    LandCoverClass(WINTER_CEREAL, "Winter cereal", "#f5d742"),
    LandCoverClass(MAIZE, "Maize", "#e67e22"),
    LandCoverClass(GRASSLAND, "Grassland (mown)", "#a8e05f"),
    LandCoverClass(DECIDUOUS, "Deciduous forest", "#2e8b57"),
    LandCoverClass(EVERGREEN, "Evergreen forest", "#0b4f2c"),
    LandCoverClass(WETLAND, "Seasonal wetland", "#0096a0"),
    LandCoverClass(WATER, "Permanent water", "#0064c8"),
    LandCoverClass(BUILT, "Built-up", "#fa0000"),
    LandCoverClass(BARE, "Bare / sparse vegetation", "#b4b4b4"),
    LandCoverClass(SHRUB, "Shrubland", "#ffbb22"),
))
# classes that are told apart only by the season (each shares a state with another class on some dates)
SEASONAL_CLASSES = (WINTER_CEREAL, MAIZE, GRASSLAND, DECIDUOUS, EVERGREEN, WETLAND)

PHASE_JITTER_DAYS = 6.0


def _state(**fractions: float) -> np.ndarray:
    vector = np.array([fractions.get(kind, 0.0) for kind in KINDS], np.float32)
    return vector / vector.sum()


# Surface states: endmember fractions (spectral mixture analysis; shade is photometric shade of canopies and buildings)
SOIL = _state(soil=0.9, npv=0.1)
SPARSE = _state(vegetation=0.25, soil=0.6, npv=0.15)  # emerging crop, autumn-sown cereal in winter
CANOPY = _state(vegetation=0.9, npv=0.05, soil=0.05)  # a closed crop or meadow canopy
RIPE = _state(npv=0.7, vegetation=0.1, soil=0.2)  # a cereal drying before its harvest
STUBBLE = _state(npv=0.45, soil=0.55)
MOWN = _state(vegetation=0.45, npv=0.35, soil=0.2)
DORMANT = _state(vegetation=0.55, npv=0.35, soil=0.1)  # a meadow or marsh in winter
FOREST = _state(vegetation=0.75, shade=0.25)  # a closed stand in full leaf (or needles)
AUTUMN = _state(vegetation=0.25, npv=0.5, shade=0.25)
LEAFLESS = _state(npv=0.5, shade=0.3, soil=0.15, vegetation=0.05)  # bark, branches, litter below
FLOODED = _state(water=0.7, vegetation=0.15, npv=0.15)
MARSH = _state(vegetation=0.7, water=0.15, npv=0.15)
OPEN_WATER = _state(water=0.96, vegetation=0.04)
URBAN = _state(roof=0.35, pavement=0.35, vegetation=0.1, soil=0.05, shade=0.15)
BARE_GROUND = _state(soil=0.92, npv=0.05, vegetation=0.03)
SCRUB = _state(vegetation=0.5, npv=0.25, soil=0.15, shade=0.1)


@dataclass(frozen=True)
class Calendar:
    """A class's year: (day of year, state) keyframes; states hold between equal neighbours and change linearly
    between different ones; before the first and after the last keyframe the end states hold."""

    keyframes: tuple[tuple[float, np.ndarray], ...]

    def fractions(self, day: np.ndarray) -> np.ndarray:
        """Endmember fractions (len(day), kinds) on the days `day` (any float days of year)."""
        days = np.array([d for d, _ in self.keyframes], np.float64)
        states = np.stack([s for _, s in self.keyframes])
        day = np.clip(np.asarray(day, np.float64), days[0], days[-1])
        return np.stack([np.interp(day, days, states[:, k]) for k in range(states.shape[1])], axis=-1).astype(np.float32)


CALENDARS: dict[int, Calendar] = {
    WINTER_CEREAL: Calendar(((0, SPARSE), (60, SPARSE), (95, CANOPY), (160, CANOPY), (180, RIPE), (205, RIPE),
                             (212, STUBBLE), (245, STUBBLE), (260, SOIL), (290, SOIL), (320, SPARSE), (366, SPARSE))),
    MAIZE: Calendar(((0, STUBBLE), (80, STUBBLE), (100, SOIL), (140, SOIL), (165, SPARSE), (195, CANOPY),
                     (260, CANOPY), (280, RIPE), (290, STUBBLE), (366, STUBBLE))),
    GRASSLAND: Calendar(((0, DORMANT), (70, DORMANT), (95, CANOPY), (145, CANOPY), (152, MOWN), (175, CANOPY),
                         (205, CANOPY), (212, MOWN), (235, CANOPY), (300, CANOPY), (330, DORMANT), (366, DORMANT))),
    DECIDUOUS: Calendar(((0, LEAFLESS), (100, LEAFLESS), (130, FOREST), (270, FOREST), (295, AUTUMN),
                         (320, LEAFLESS), (366, LEAFLESS))),
    EVERGREEN: Calendar(((0, FOREST), (366, FOREST))),
    WETLAND: Calendar(((0, FLOODED), (90, FLOODED), (140, MARSH), (240, MARSH), (280, DORMANT), (330, FLOODED),
                       (366, FLOODED))),
    WATER: Calendar(((0, OPEN_WATER), (366, OPEN_WATER))),
    BUILT: Calendar(((0, URBAN), (366, URBAN))),
    BARE: Calendar(((0, BARE_GROUND), (366, BARE_GROUND))),
    SHRUB: Calendar(((0, SCRUB), (366, SCRUB))),
}


def class_fractions(code: int, day: float | np.ndarray) -> np.ndarray:
    """Endmember fractions over `spectra.KINDS` of class `code` on day of year `day`: (kinds,) or (len(day), kinds)."""
    scalar = np.ndim(day) == 0
    out = CALENDARS[code].fractions(np.atleast_1d(day))
    return out[0] if scalar else out


def season_days(dates: int) -> np.ndarray:
    """The days of year of a season of `dates` acquisitions: evenly from mid-February to late November (one date:
    midsummer), as a cloud-filtered Sentinel-2 year over western Europe keeps about one clear date a month."""
    if dates == 1:
        return np.array([196])
    return np.rint(np.linspace(45, 325, dates)).astype(int)
