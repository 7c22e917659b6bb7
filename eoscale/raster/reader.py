"""Reading windows of a scene's bands on its reference grid, and which of their pixels hold data.

Bands that lie on the reference grid are read directly; others (the 20 m bands of a Sentinel-2 product
kept as one file per band, or a band in another CRS) are resampled through a GDAL `WarpedVRT` onto that
grid, so a window means the same ground in every band.

Validity follows GDAL's per-dataset mask semantics (RFC 15, as `gdalinfo` and QGIS read a file): a file's mask
band (`.msk` or internal) or its alpha band says where it holds data; a file without either holds no data
where *every* band has its nodata value (0 when it declares none: Sentinel-2's convention, whose JPEG 2000
bands declare no nodata). A scene of several files is read as GDAL reads them stacked in one VRT: the mask
bands together, and the nodata-only bands all at nodata. One dark band at 0 does not make a pixel missing.
A scene's classification layer (a SAFE's SCL, `Scene.class_mask`) adds to the mask: its nodata classes, resampled by
nearest neighbour onto the reference grid, count as masked.

Bands whose file values are not on the store's scale (`BandFile.scale`/`offset`: Sentinel-2 L2A from baseline 04.00)
are mapped onto it as they are read; a valid pixel stays at least 1 (nodata is 0), nodata stays nodata. Float files
(`BandFile.decode`: SAR backscatter, terrain layers) are read as float and mapped by `eoscale.raster.float_bands`, after
resampling; a SAR band is resampled in linear power whatever its file holds (a file in decibels through
`eoscale.raster.power_warp`), then taken to decibels. A SAR scene's border noise
(`Scene.border_noise`) adds to the mask, decided on a halo around each window.

A scene with other sensors' bands on its grid (`eoscale.raster.fused`: `BandFile.sensor`) is read as groups of bands,
one a sensor: the scene's own bands say where its own sensor has data as above; another sensor's bands say where that
sensor has data (not all of them at nodata). A pixel holds data where any sensor's group does (`MaskedWindow.valid`),
and `MaskedWindow.groups` says, group by group, where each does not: clouds stay nodata in the optical bands only, a
radar swath's edge in the radar bands only. Static layers (`BandFile.static`) say nothing of where there is data.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import rasterio
from rasterio.enums import MaskFlags, Resampling
from rasterio.errors import RasterioError
from rasterio.vrt import WarpedVRT
from rasterio.windows import Window

from eoscale.errors import InputError
from eoscale.raster.float_bands import to_store
from eoscale.raster.power_warp import PowerWarp
from eoscale.raster.scene import Scene, nodata_of


@dataclass(frozen=True)
class MaskedWindow:
    """A window of a scene: its pixels, and where (and why) they hold no data."""

    pixels: np.ndarray  # (band, y, x) uint16
    by_mask: np.ndarray  # (y, x) True where a file's mask or alpha band says no data
    by_nodata: np.ndarray  # (y, x) True where the mask bands do not, but every nodata-only band is at nodata
    # a scene with other sensors' bands: (the bands of one other sensor, True where it has no data) a sensor
    others: tuple[tuple[tuple[int, ...], np.ndarray], ...] = ()
    static: tuple[int, ...] = ()  # the static layers' bands (a DEM's), when the scene has other sensors' bands

    @property
    def valid(self) -> np.ndarray:
        """Where any sensor has data (the scene's own: neither its masks nor its nodata say none)."""
        valid = ~(self.by_mask | self.by_nodata)
        for _, missing in self.others:
            valid = valid | ~missing
        return valid

    def groups(self) -> list[tuple[tuple[int, ...] | None, np.ndarray]]:
        """(bands, where they hold no data) of each group: the scene's own (None: every band, the only group of a
        scene without other sensors' bands), each other sensor's, then the static layers, which hold no data where
        no sensor does."""
        if not self.others:
            return [(None, ~self.valid)]
        taken = {b for bands, _ in self.others for b in bands} | set(self.static)
        own = tuple(b for b in range(len(self.pixels)) if b not in taken)
        out = [(own, self.by_mask | self.by_nodata), *self.others]
        return out + ([(self.static, ~self.valid)] if self.static else [])


def has_mask_band(src: rasterio.io.DatasetReader) -> bool:
    """Whether GDAL reads the file's validity from a mask band (per-dataset mask or alpha), not from nodata."""
    return any(MaskFlags.per_dataset in flags or MaskFlags.alpha in flags for flags in src.mask_flag_enums)


def on_grid_file(dataset: rasterio.io.DatasetReader | WarpedVRT | PowerWarp) -> bool:
    return not isinstance(dataset, WarpedVRT | PowerWarp)


# GDAL's block cache per process (default: 5 % of the machine's memory, ~1.2 GB here, filled by a large scene
# and never given back). Readers go through a scene in rows of windows, so it needs to hold the rows of blocks
# that one row of windows crosses; more only keeps blocks nobody reads again.
GDAL_CACHE_MIN = 32 * 2**20
GDAL_CACHE_MAX = 512 * 2**20


def gdal_cache(nbytes: int = GDAL_CACHE_MIN) -> rasterio.Env:
    """A rasterio environment whose GDAL block cache holds at most `nbytes` (clipped to GDAL_CACHE_MIN..MAX;
    the cache is one per process: each Dask task that reads scenes enters it)."""
    return rasterio.Env(GDAL_CACHEMAX=int(min(max(nbytes, GDAL_CACHE_MIN), GDAL_CACHE_MAX)))


class SceneReader:
    """Reads windows of all bands of a scene (in the scene's band order) as one (band, y, x) uint16 array.

    Opens each file once; use it as a context manager. GDAL's block cache makes neighbouring windows of the
    same internal TIFF tile cheap, so callers should read windows in row-major order.
    """

    def __init__(self, scene: Scene, *, resampling: Resampling = Resampling.bilinear) -> None:
        self.scene = scene
        self._datasets: dict[str, rasterio.io.DatasetReader | WarpedVRT | PowerWarp] = {}
        self._files: list[rasterio.io.DatasetReader] = []
        # path -> [(position in the output, band index in the file)]
        self._reads: dict[str, list[tuple[int, int]]] = defaultdict(list)
        self._linear = [(p, b.scale, b.offset) for p, b in enumerate(scene.bands)
                        if (b.scale, b.offset) != (1.0, 0.0) and not b.decode]
        self._float_paths = {b.path for b in scene.bands if b.decode}
        decibels = {b.path for b in scene.bands if b.decode == "db"}
        self._power_paths: set[str] = set()  # files in decibels read through a `PowerWarp`: linear power
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
            if on_grid:
                self._datasets[path] = src
            elif path in decibels:  # averaged in linear power, not in dB (`eoscale.raster.power_warp`)
                self._datasets[path] = PowerWarp(src, crs=scene.crs, transform=scene.transform, width=scene.width,
                                                 height=scene.height, resampling=resampling, src_nodata=nodata_of(src))
                self._power_paths.add(path)
            else:
                self._datasets[path] = WarpedVRT(
                    src,
                    crs=scene.crs,
                    transform=scene.transform,
                    width=scene.width,
                    height=scene.height,
                    resampling=resampling,
                    # the file's nodata (0 where it declares none, as Sentinel-2's JPEG 2000 bands) takes no part in
                    # the resampling: else bilinear blends 0 into the pixels beside a nodata edge
                    src_nodata=nodata_of(src),
                    nodata=scene.nodata,
                )
        # which files say where they hold data with a mask band, and the nodata value of the others' bands
        # (a resampled file: the VRT's nodata, which the warper also writes where the file's mask says none)
        # a static layer's file (a DEM's, `BandFile.static`) takes no part: the scene's own bands say where it has data
        # so does another sensor's band (`BandFile.sensor`): its own group says where that sensor has data
        static = {b.path for b in scene.bands if b.static or _other(scene, b)} - {
            b.path for b in scene.bands if not b.static and not _other(scene, b)}
        self._own = [p for p, b in enumerate(scene.bands) if not b.static and not _other(scene, b)]
        self._static = tuple(p for p, b in enumerate(scene.bands) if b.static)
        others: dict[str, list[int]] = {}
        for position, band in enumerate(scene.bands):
            if _other(scene, band) and not band.static:
                others.setdefault(band.sensor, []).append(position)
        self._others = [tuple(positions) for positions in others.values()]
        self._mask_paths = [p for p in self._reads if p not in static and on_grid_file(self._datasets[p])
                            and has_mask_band(self._datasets[p])]
        self._nodata = {p: nodata_of(self._datasets[p]) if on_grid_file(self._datasets[p]) else float(scene.nodata)
                        for p in self._reads if p not in self._mask_paths and p not in static}
        # a float file's own nodata (what `to_store` maps onto the store's: 0 where it declares none, as for any file;
        # a resampled file's is the VRT's); its store pixels are compared with the store's nodata
        self._file_nodata = {p: nodata_of(self._datasets[p]) if on_grid_file(self._datasets[p])
                             else self._datasets[p].nodata for p in self._float_paths}
        self._nodata.update({p: float(scene.nodata) for p in self._float_paths if p in self._nodata})
        self._classes: WarpedVRT | None = None
        if scene.class_mask is not None:
            src = rasterio.open(scene.class_mask.path)
            self._files.append(src)
            # nearest neighbour: classes are not numbers; outside the layer the VRT holds 0, SCL's "no data"
            self._classes = WarpedVRT(src, crs=scene.crs, transform=scene.transform, width=scene.width,
                                      height=scene.height, resampling=Resampling.nearest)

    def __enter__(self) -> SceneReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for ds in [*self._datasets.values(), self._classes]:
            if ds is not None and not on_grid_file(ds):
                ds.close()
        for src in self._files:
            src.close()

    def cache_bytes(self) -> int:
        """The GDAL block cache that reading the scene in rows needs: two rows of blocks (a row of windows may
        straddle two) of every file read, whatever the scene's height (see `gdal_cache`)."""
        total = 0
        for src in self._files:
            block_rows = max(height for height, _ in src.block_shapes)
            total += 2 * block_rows * src.width * sum(np.dtype(d).itemsize for d in src.dtypes)
        return total

    def read(self, row_off: int, col_off: int, height: int, width: int) -> np.ndarray:
        """The window's pixels of every band, shape (band, height, width), dtype uint16."""
        out = np.empty((len(self.scene.bands), height, width), dtype=np.uint16)
        window = Window(col_off, row_off, width, height)
        for path, reads in self._reads.items():
            positions = [p for p, _ in reads]
            indexes = [i for _, i in reads]
            try:
                values = self._datasets[path].read(indexes, window=window)
            except RasterioError as err:
                message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
                raise InputError(f"{path!r} could not be read ({message}): the file is damaged or truncated") from None
            if path in self._float_paths:
                for (position, _), plane in zip(reads, values, strict=True):
                    out[position] = self._float_to_store(position, plane)
            else:
                out[positions] = values
        for position, scale, offset in self._linear:
            out[position] = self._to_store_scale(out[position], scale, offset)
        return out

    def _float_to_store(self, position: int, values: np.ndarray) -> np.ndarray:
        band = self.scene.bands[position]
        decode = "power_db" if band.path in self._power_paths else band.decode
        return to_store(values, decode=decode, scale=band.scale, offset=band.offset,
                        file_nodata=self._file_nodata[band.path], store_nodata=self.scene.nodata)

    def _border_noise(self, row_off: int, col_off: int, height: int, width: int) -> np.ndarray:
        """Where the scene's border-noise rule masks the window (read with its halo), shape (height, width)."""
        rule = self.scene.border_noise
        top, left, rows, cols, inner = rule.halo(row_off, col_off, height, width, (self.scene.height, self.scene.width))
        return rule.masked(self.read(top, left, rows, cols)[self._own], self.scene.nodata)[inner]

    def _to_store_scale(self, values: np.ndarray, scale: float, offset: float) -> np.ndarray:
        nodata = self.scene.nodata
        mapped = np.rint(values * np.float32(scale) + np.float32(offset)).clip(1, 65535).astype(np.uint16)
        return np.where(values == nodata, np.uint16(nodata), mapped)

    def _class_masked(self, window: Window | None) -> np.ndarray:
        """Where the scene's classification layer says nodata (all False without one)."""
        assert self._classes is not None
        try:
            classes = self._classes.read(self.scene.class_mask.index, window=window)
        except RasterioError as err:
            message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise InputError(f"{self.scene.class_mask.path!r} could not be read ({message}): the file is damaged or "
                             f"truncated") from None
        return self.scene.class_mask.masked(classes)

    def read_masked(self, row_off: int, col_off: int, height: int, width: int) -> MaskedWindow:
        """The window's pixels of every band and where they hold no data (see the module docstring)."""
        pixels = self.read(row_off, col_off, height, width)
        window = Window(col_off, row_off, width, height)
        by_mask = np.zeros((height, width), dtype=bool)
        for path in self._mask_paths:
            by_mask |= self._dataset_mask(path, window) == 0
        if self._classes is not None:
            by_mask |= self._class_masked(window)
        if self.scene.border_noise is not None:
            by_mask |= self._border_noise(row_off, col_off, height, width)
        if self._nodata:
            by_nodata = np.ones((height, width), dtype=bool)
            for path, value in self._nodata.items():
                for position, _ in self._reads[path]:
                    by_nodata &= pixels[position] == value
            by_nodata &= ~by_mask
        else:
            by_nodata = np.zeros((height, width), dtype=bool)
        if not self._others:
            return MaskedWindow(pixels, by_mask, by_nodata)
        others = tuple((bands, np.all(pixels[list(bands)] == self.scene.nodata, axis=0)) for bands in self._others)
        return MaskedWindow(pixels, by_mask, by_nodata, others, self._static)

    def planning_mask(self, row_off: int = 0, height: int | None = None) -> np.ndarray:
        """Where the scene holds data, as the tile plan sees it, in rows `row_off` to `row_off + height` (default:
        the whole scene), shape (y, x): the mask bands where the scene has them (exact, one band read), else the
        reference band against its nodata value (one band, not all: the writer decides each tile's pixels
        exactly)."""
        height = self.scene.height - row_off if height is None else height
        window = Window(0, row_off, self.scene.width, height)
        if self._mask_paths:
            valid = np.ones((height, self.scene.width), dtype=bool)
            for path in self._mask_paths:
                valid &= self._dataset_mask(path, window) != 0
        else:
            valid = self.read_reference(window) != self.scene.nodata
        if self._classes is not None:
            valid &= ~self._class_masked(window)
        if self.scene.border_noise is not None:
            valid &= ~self._border_noise(row_off, 0, height, self.scene.width)
        for bands in self._others:  # another sensor's file holds all its bands at nodata where it has no data
            valid |= self.read_band(bands[0], window) != self.scene.nodata
        return valid

    def _dataset_mask(self, path: str, window: Window | None) -> np.ndarray:
        try:
            return self._datasets[path].dataset_mask(window=window)
        except RasterioError as err:
            message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise InputError(f"{path!r} could not be read ({message}): the file is damaged or truncated") from None

    def describe_validity(self) -> str:
        """How this scene says where it holds no data, in words for `eoscale info`."""
        parts = [f"mask band of {len(self._mask_paths)} file(s)"] if self._mask_paths else []
        if self.scene.class_mask is not None:
            mask = self.scene.class_mask
            parts.append(f"{mask.name} bits {mask.bits:#b}" if mask.bits else
                         f"{mask.name} classes {','.join(map(str, mask.classes))}")
        values = sorted(set(self._nodata.values()))
        if values:
            parts.append(f"nodata {', '.join(f'{v:g}' for v in values)} in every band")
        if self.scene.border_noise is not None:
            rule = self.scene.border_noise
            parts.append(f"border noise (every band ≤ {rule.floor_db:g} dB within {rule.margin_px} px of nodata)")
        text = " and ".join(parts)
        if self._others:
            names = sorted({self.scene.bands[bands[0]].sensor for bands in self._others})
            text += f"; or {', '.join(names)} bands where they hold data"
        return text

    def read_reference(self, window: Window | None = None) -> np.ndarray:
        """The first band that lies on the reference grid (read without resampling), shape (y, x): the whole of
        it, or `window`."""
        for position, band in enumerate(self.scene.bands):
            if not band.static and not _other(self.scene, band) and on_grid_file(self._datasets[band.path]):
                return self.read_band(position, window)
        return self.read_band(0, window)

    def read_band(self, position: int, window: Window | None = None) -> np.ndarray:
        band = self.scene.bands[position]
        try:
            values = self._datasets[band.path].read(band.index, window=window)
            if band.decode:
                return self._float_to_store(position, values)
            return values.astype(np.uint16, copy=False)
        except RasterioError as err:
            message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise InputError(f"{band.path!r} could not be read ({message}): the file is damaged or truncated") from None


def _other(scene: Scene, band) -> bool:
    """Whether `band` is another sensor's, warped onto `scene`'s grid (`eoscale.raster.fused`)."""
    return bool(band.sensor) and band.sensor != scene.sensor
