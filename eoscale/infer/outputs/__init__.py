"""What `eoscale predict` writes for a scene, by the target kind of its checkpoint (`eoscale.contract.TARGET_KINDS`).

    writer = writer_for(contract)(contract, confidence=True)     # the class map writer for "classes"

`base` is the output-writer protocol and the registry (`register_writer(kind, cls)`), `rasters` what every writer
shares (part files, `.partial` names, COGs from parts), `classes` the class map of today (class COG with codes
and colours, confidence, class areas, quick-look, STAC Item), `values` per-pixel regression maps (float32 COG,
colour-ramp quick-look, value summary, STAC Item), `change` a change model's map (a class map of change classes,
`<scene>_change.tif`). A new target kind's maps are one module here that
registers its writer (see ARCHITECTURE.md, "where a change goes").

The names of the module this package replaces (`eoscale.infer.outputs`: `MapEncoding`, `map_tags`, `write_cog`,
`SceneOutputs`, ...) still import from here.
"""

from __future__ import annotations

from eoscale.contract import BandContract
from eoscale.infer.outputs.base import (
    MapContext,
    OutputWriter,
    PartSink,
    SceneFiles,
    register_writer,
    unregister_writer,
    writer_class,
)
from eoscale.infer.outputs.change import ChangeWriter  # registers the "change" writer
from eoscale.infer.outputs.classes import (
    CONFIDENCE_NODATA,
    QUICKLOOK_PIXELS,
    ClassWriter,
    MapEncoding,
    PartWriter,
    SceneOutputs,
    map_tags,
    most_probable,
    most_probable_on_device,
    write_quicklook,
)
from eoscale.infer.outputs.rasters import (
    BLOCKSIZE,
    Georef,
    PartFiles,
    Piece,
    part_path,
    partial,
    publish,
    read_part,
    write_cog,
)
from eoscale.infer.outputs.values import VALUES_NODATA, ValueWriter  # registers the "values" writer


def writer_for(contract: BandContract) -> type[OutputWriter]:
    """The output writer of `contract`'s target kind; an InputError in one line if none is registered."""
    return writer_class(contract.target)


__all__ = [
    "BLOCKSIZE", "CONFIDENCE_NODATA", "QUICKLOOK_PIXELS", "ChangeWriter", "ClassWriter", "Georef", "MapContext", "MapEncoding",
    "OutputWriter", "PartFiles", "PartSink", "PartWriter", "Piece", "SceneFiles", "SceneOutputs", "map_tags",
    "most_probable", "most_probable_on_device", "part_path", "partial", "publish", "read_part", "register_writer",
    "unregister_writer", "VALUES_NODATA", "ValueWriter", "write_cog", "write_quicklook", "writer_class", "writer_for",
]
