"""The synthetic stores of `eoscale bench learning --synthetic FOLDER --seeds 0,1,2`: one small, imbalanced, noisy
label set a seed (`eoscale.synth.imbalanced`, the issue-38 case: 4 bands, 8 classes, two of them ~90 % of the pixels,
rare ones under 1 %, labels off at boundaries), ingested as `eoscale ingest --tile-size 64` does, in
`FOLDER/seed<N>/tiles.zarr`. `set.json` beside it says what was written, so `--reuse` keeps a set only if it is the
one asked for (the same seed and sizes write the same files).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from eoscale.errors import InputError, OutputExistsError

SET_FILE = "set.json"


@dataclass(frozen=True)
class SetSpec:
    """What one synthetic set is made of: `write_imbalanced`'s seed, scenes and scene size, the ingest's tiles."""

    seed: int
    scenes: int = 2
    size: int = 384
    tile_size: int = 64


def imbalanced_store(folder: str | Path, spec: SetSpec, *, reuse: bool = False) -> tuple[Path, dict[str, float]]:
    """The tile store of `spec` in `folder/seed<N>/` and its classes' shares of the labelled pixels: written and
    ingested, or with `reuse` the one already there when its `set.json` matches `spec`."""
    from eoscale.data import read_store_attrs
    from eoscale.errors import StoreError

    place = Path(folder) / f"seed{spec.seed}"
    store, described = place / "tiles.zarr", place / SET_FILE
    if place.exists():
        if not reuse:
            raise OutputExistsError(f"{str(place)!r} exists: pass --reuse to bench the set written there, or give "
                                    "another --synthetic folder")
        saved = json.loads(described.read_text()) if described.is_file() else {}
        if saved.get("spec") == asdict(spec):
            try:
                read_store_attrs(str(store))
                return store, saved["class_shares"]
            except StoreError:
                pass  # an ingest that did not finish: written again below
        elif saved:
            raise InputError(f"{str(place)!r} holds another set ({saved.get('spec')}) than asked ({asdict(spec)}): "
                             "give the same --scenes/--size/--tile-size, or another --synthetic folder")
    return _write(place, spec)


def _write(place: Path, spec: SetSpec) -> tuple[Path, dict[str, float]]:
    import shutil

    from eoscale.ingest import ingest
    from eoscale.synth.imbalanced import write_imbalanced

    if place.exists():
        shutil.rmtree(place)
    written = write_imbalanced(place, seed=spec.seed, scenes=spec.scenes, size=spec.size)
    store = place / "tiles.zarr"
    ingest([str(p) for p in written.scenes], store, labels=[str(p) for p in written.labels],
           classes=str(written.classes), tile_size=spec.tile_size, workers=1, progress=False)
    # written last: a set without it is one whose ingest did not finish
    (place / SET_FILE).write_text(json.dumps({"spec": asdict(spec), "class_shares": written.fractions}, indent=2))
    return store, written.fractions
