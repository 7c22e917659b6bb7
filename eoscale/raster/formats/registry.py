"""The product-format registry: each format says whether a path is its product (`detect`) and opens it as a `Scene`
(`open(path, *, band_names, bands, scl_classes)`); the first format, in registered order, that detects a path opens
it (`eoscale.raster.sources.open_scene`). A format may also list the products inside a folder of them
(`products_in`: a download folder of SAFE products)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from eoscale.errors import InputError
from eoscale.raster.scene import Scene


@dataclass(frozen=True)
class ProductFormat:
    """A product format: its name, how a path is recognised, how it is opened, and (optionally) the products inside a
    folder of them."""

    name: str
    detect: Callable[[str], bool]
    open: Callable[..., Scene]
    products_in: Callable[[str], list[str] | None] | None = None


FORMATS: list[ProductFormat] = []


def register_format(fmt: ProductFormat, *, before: str | None = None) -> ProductFormat:
    """Add `fmt` to the registry: last, or just before the format called `before` (a specific format before the
    catch-all band folder and multiband file)."""
    if any(f.name == fmt.name for f in FORMATS):
        raise ValueError(f"a product format called {fmt.name!r} is registered already")
    names = [f.name for f in FORMATS]
    FORMATS.insert(names.index(before) if before in names else len(FORMATS), fmt)
    return fmt


def unregister_format(name: str) -> None:
    """Take format `name` out of the registry (tests that register a stub)."""
    FORMATS[:] = [f for f in FORMATS if f.name != name]


def detect_format(path: str) -> ProductFormat:
    """The first registered format that recognises `path`."""
    for fmt in FORMATS:
        if fmt.detect(path):
            return fmt
    raise InputError(f"{path!r} is no product eoscale reads (formats: {', '.join(f.name for f in FORMATS)})")


def products_in(path: str) -> list[str] | None:
    """The products inside folder `path` (a folder of SAFE products), or None when no format finds any."""
    for fmt in FORMATS:
        found = fmt.products_in(path) if fmt.products_in else None
        if found:
            return found
    return None
