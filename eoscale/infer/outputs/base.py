"""The output-writer protocol: what a target kind's maps are, from the blended network output to the files.

`eoscale predict` knows nothing of classes, values or change: for each scene it asks the writer of the
checkpoint's target kind (`eoscale.contract.TARGET_KINDS`, `writer_for`) for

    writer = writer_for(contract)(contract, confidence=...)
    writer.channels()                  the channels of the network's output the maps are made of
    writer.activate(logits)            the network's raw output as what the maps are made of (float32)
    writer.scene_files(folder, id)     the scene's files (a dataclass: `files()`, the done-marker last; `check`)
    part = writer.part(path, scene)    one process's rows of one column tile: `write(block)` for each blended
                                       block, then `close(**meta)` (or `abort()`); the part's raw rows go to
                                       `path` + suffixes, its description (`piece`, summary state) to `path.json`
    writer.finish(scene, pieces, described, files, context)
                                       the scene's COGs (from the parts' raw rows, `eoscale.infer.outputs.rasters`),
                                       its summary (class areas for classes), its quick-look and its STAC Item, all
                                       under their `.partial` names; returns the summary (plain data)
    writer.describe(summary)           (a classmethod) what `predict`'s table shows of a scene (`summary_column` heads it)

`register_writer(kind, cls)` adds a writer; the class map of today ("classes") is `eoscale.infer.outputs.classes`.
A writer module imports this module and `rasters`, never `eoscale.infer.run` (which calls it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from torch import Tensor

from eoscale.contract import BandContract
from eoscale.errors import InputError
from eoscale.infer.outputs.rasters import Georef, Piece


@dataclass(frozen=True)
class MapContext:
    """What every map of a run shares, whatever its target kind: the grid, the model's lineage (with the scene's
    files), the tags every map carries (`EOSCALE_CHECKPOINT`, ..., `EOSCALE_LINEAGE`), the checkpoint and the
    quick-look's title."""

    georef: Georef
    lineage: dict = field(repr=False)
    tags: dict[str, str] = field(repr=False)
    checkpoint: str
    title: str


class PartSink(Protocol):
    """One process's share of one column tile of a scene, appended block by block."""

    def write(self, block: Any) -> None: ...  # an `eoscale.infer.predict.Block`

    def close(self, **meta: object) -> None: ...

    def abort(self) -> None: ...


class SceneFiles(Protocol):
    """The files of one scene's result (a dataclass of paths: `SceneResult.outputs` lists its fields)."""

    def files(self) -> list[Path]: ...  # the file whose presence marks the scene as done last

    def check(self, *, overwrite: bool) -> None: ...  # OutputExistsError for a finished result unless `overwrite`


class OutputWriter:
    """A target kind's maps (see the module docstring). Subclass it, set `kind`, and `register_writer`."""

    kind: ClassVar[str] = ""
    summary_column: ClassVar[str] = "summary"  # the heading of `describe`'s column in predict's table
    files_note: ClassVar[str] = "maps in {output}/"  # predict's last line, `{output}` the output folder

    def __init__(self, contract: BandContract, *, confidence: bool = False) -> None:
        self.contract = contract
        self.confidence = confidence

    def channels(self) -> int:
        return self.contract.output_channels()

    def cell(self) -> int:
        """Pixels a side of the cells the maps are made of: 1 (the scene's pixels) unless the network gives one output
        a cell of several (an embedding field at its features' stride: `eoscale embed --field-stride`)."""
        return 1

    def activate(self, logits: Tensor) -> Tensor:
        return self.contract.activate(logits)

    def scene_files(self, folder: Path, scene_id: str) -> SceneFiles:
        raise NotImplementedError

    def part(self, path: Path, scene: Any) -> PartSink:
        raise NotImplementedError

    def finish(self, scene: Any, pieces: list[Piece], described: list[dict], files: SceneFiles,
               context: MapContext) -> dict:
        raise NotImplementedError

    @classmethod
    def describe(cls, summary: dict) -> str:
        """What predict's table shows of a scene's `summary` (`finish`'s)."""
        return ""


_WRITERS: dict[str, type[OutputWriter]] = {}


def register_writer(kind: str, cls: type[OutputWriter]) -> type[OutputWriter]:
    """Make `cls` the writer of target kind `kind` (replacing one registered before); returns `cls`."""
    _WRITERS[kind] = cls
    return cls


def unregister_writer(kind: str) -> None:
    _WRITERS.pop(kind, None)


def writer_class(kind: str) -> type[OutputWriter]:
    """The writer registered for target kind `kind`; an InputError in one line if there is none."""
    try:
        return _WRITERS[kind]
    except KeyError:
        raise InputError(f"no output writer for target kind {kind!r}: eoscale predict has writers for "
                         f"{', '.join(sorted(_WRITERS)) or 'no kind'}") from None
