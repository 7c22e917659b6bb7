"""Reading windows of a scene's bands on its reference grid.

Bands that lie on the reference grid are read directly; others (the 20 m bands of a Sentinel-2 product
kept as one file per band, or a band in another CRS) are resampled through a GDAL `WarpedVRT` onto that
grid, so a window means the same ground in every band.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import rasterio
from rasterio.enums import Resampling
from rasterio.errors import RasterioError
from rasterio.vrt import WarpedVRT
from rasterio.windows import Window

from eoscale.errors import InputError
from eoscale.raster.sources import Scene


class SceneReader:
    """Reads windows of all bands of a scene (in the scene's band order) as one (band, y, x) uint16 array.

    Opens each file once; use it as a context manager. GDAL's block cache makes neighbouring windows of the
    same internal TIFF tile cheap, so callers should read windows in row-major order.
    """

    def __init__(self, scene: Scene, *, resampling: Resampling = Resampling.bilinear) -> None:
        self.scene = scene
        self._datasets: dict[str, rasterio.io.DatasetReader | WarpedVRT] = {}
        self._files: list[rasterio.io.DatasetReader] = []
        # path -> [(position in the output, band index in the file)]
        self._reads: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for position, band in enumerate(scene.bands):
            self._reads[band.path].append((position, band.index))
        for path in self._reads:
            src = rasterio.open(path)
            self._files.append(src)
            on_grid = (
                src.crs == scene.crs
                and src.transform.almost_equals(scene.transform)
                and (src.width, src.height) == (scene.width, scene.height)
            )
            self._datasets[path] = src if on_grid else WarpedVRT(
                src,
                crs=scene.crs,
                transform=scene.transform,
                width=scene.width,
                height=scene.height,
                resampling=resampling,
                nodata=scene.nodata,
            )

    def __enter__(self) -> SceneReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for ds in self._datasets.values():
            if isinstance(ds, WarpedVRT):
                ds.close()
        for src in self._files:
            src.close()

    def read(self, row_off: int, col_off: int, height: int, width: int) -> np.ndarray:
        """The window's pixels of every band, shape (band, height, width), dtype uint16."""
        out = np.empty((len(self.scene.bands), height, width), dtype=np.uint16)
        window = Window(col_off, row_off, width, height)
        for path, reads in self._reads.items():
            positions = [p for p, _ in reads]
            indexes = [i for _, i in reads]
            try:
                out[positions] = self._datasets[path].read(indexes, window=window)
            except RasterioError as err:
                message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
                raise InputError(f"{path!r} could not be read ({message}): the file is damaged or truncated") from None
        return out

    def read_reference(self) -> np.ndarray:
        """The whole of the first band that lies on the reference grid (read without resampling), shape (y, x)."""
        for position, band in enumerate(self.scene.bands):
            if not isinstance(self._datasets[band.path], WarpedVRT):
                return self.read_band(position)
        return self.read_band(0)

    def read_band(self, position: int) -> np.ndarray:
        band = self.scene.bands[position]
        try:
            return self._datasets[band.path].read(band.index).astype(np.uint16, copy=False)
        except RasterioError as err:
            message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise InputError(f"{band.path!r} could not be read ({message}): the file is damaged or truncated") from None
