"""A multi-band file: bands named by their descriptions, by `band_names`, or by GDAL's colour interpretation for RGB
files; an alpha band is not a band of the scene (it says where the others hold data). The file's own grid is the
reference grid; the date is its ACQUISITIONDATETIME tag, if any (never its TIFFTAG_DATETIME: when the file was
written). Any path no other format recognises is opened as one (the last format)."""

from __future__ import annotations

from pathlib import Path

from rasterio.enums import ColorInterp

from eoscale.bands import normalise_band_name
from eoscale.errors import InputError
from eoscale.raster.float_optical import UNSTATED, float_bands
from eoscale.raster.formats.registry import ProductFormat
from eoscale.raster.scene import BandFile, Scene, check_crs, nodata_of, open_raster, tiff_date
from eoscale.sensors import sensor_of_bands

_RGB = {ColorInterp.red: "RED", ColorInterp.green: "GREEN", ColorInterp.blue: "BLUE"}


def open_multiband(path: str, *, band_names: list[str] | None = None, bands: list[str] | None = None,
                   scl_classes: tuple[int, ...] | None = None) -> Scene:
    """The multi-band file at `path` as a scene (`band_names`: one name per band, in file order)."""
    with open_raster(path) as src:
        crs = check_crs(path, src.crs)
        floating = float_bands(path, src.dtypes)  # mapped once the conversion is known (eoscale.raster.float_optical)
        # an alpha band says where the others hold data (`eoscale.raster.reader`): it is not a band of the scene
        data = [i for i, c in enumerate(src.colorinterp, start=1) if c != ColorInterp.alpha]
        if band_names is not None:
            if len(band_names) != len(data):
                alpha = " (and an alpha band)" if len(data) < src.count else ""
                raise InputError(
                    f"{path!r} has {len(data)} bands{alpha} but --band-names gives {len(band_names)}: give one name per band"
                )
            names = [normalise_band_name(n) for n in band_names]
        else:
            names = [normalise_band_name(src.descriptions[i - 1]) if src.descriptions[i - 1] else "" for i in data]
            interp = [_RGB.get(src.colorinterp[i - 1]) for i in data]
            if not any(names) and all(interp) and len(set(interp)) == len(interp):
                names = interp  # an RGB file without band descriptions: GDAL's colour interpretation names them
            if not all(names):
                raise InputError(
                    f"{path!r} has bands without descriptions: name them with --band-names "
                    f"(e.g. --band-names B02,B03,B04,B08)"
                )
        if len(set(names)) != len(names):
            raise InputError(f"{path!r} names a band twice: {', '.join(names)}")
        return Scene(
            id=Path(path).stem,
            bands=tuple(BandFile(n, path, i, decode=UNSTATED if floating[i - 1] else "")
                        for i, n in zip(data, names, strict=True)),
            crs=crs,
            transform=src.transform,
            width=src.width,
            height=src.height,
            nodata=nodata_of(src),
            paths=(path,),
            sensor=sensor_of_bands(names, what=repr(path)),
            date=tiff_date(src),
        )


FORMAT = ProductFormat("multiband file", lambda path: True, open_multiband)
