"""The output-writer protocol (`eoscale.infer.outputs`): a target kind's maps are one writer, registered.

A stub writer registered here for the "values" kind (in place of its own, `eoscale.infer.outputs.values`) writes the raw first
channel of the network's output as a float COG, through the real `predict` path, without any other change to
eoscale: the check that a new task type's maps touch only the files ARCHITECTURE.md's table names. Checkpoints
written before the target kind was recorded read as classes; an unknown kind is refused in one line, exit 2.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import rasterio
import torch
from rich.console import Console

from eoscale.cli import main
from eoscale.contract import CONTRACT_KEY, TARGET_KINDS, TARGET_TAG, BandContract, read_contract
from eoscale.errors import InputError
from eoscale.infer.outputs import (
    ChangeWriter,
    ClassWriter,
    MapContext,
    OutputWriter,
    PartFiles,
    Piece,
    partial,
    register_writer,
    unregister_writer,
    write_cog,
    writer_for,
)
from eoscale.infer.run import PredictConfig, predict
from eoscale.infer.summary import print_summary

NODATA = -9999.0


@dataclass(frozen=True)
class RawFiles:
    raw: Path

    def files(self) -> list[Path]:
        return [self.raw]

    def check(self, *, overwrite: bool) -> None:
        if self.raw.exists() and not overwrite:
            raise InputError(f"{str(self.raw)!r} exists")


class RawPart:
    """The first channel of each block, float32, nodata where the scene has none; its sum and count."""

    def __init__(self, path: Path) -> None:
        self.files = PartFiles(path, [".raw"])
        self.total, self.count = 0.0, 0

    def write(self, block) -> None:
        self.files.start(block.row, block.col, int(block.probs.shape[2]))
        values = block.probs[0].numpy().astype(np.float32)
        values[~block.valid] = NODATA
        self.files.append({".raw": values})
        self.total += float(values[block.valid].sum())
        self.count += int(block.valid.sum())

    def close(self, **meta) -> None:
        self.files.close({"raw": {"sum": self.total, "count": self.count}}, **meta)

    def abort(self) -> None:
        self.files.abort()


class RawWriter(OutputWriter):
    kind = "values"
    summary_column = "mean value"
    files_note = "raw maps in {output}/ (<scene>_raw.tif)"

    def channels(self) -> int:
        return len(self.contract.classes)  # the test network's head

    def scene_files(self, folder: Path, scene_id: str) -> RawFiles:
        return RawFiles(Path(folder) / f"{scene_id}_raw.tif")

    def part(self, path: Path, scene) -> RawPart:
        return RawPart(path)

    def finish(self, scene, pieces: list[Piece], described: list[dict], files: RawFiles, context: MapContext) -> dict:
        write_cog(pieces, ".raw", partial(files.raw), context.georef, dtype="float32", nodata=NODATA,
                  overview="average", tags={**context.tags, TARGET_TAG: self.kind}, description="first channel")
        total = sum(d["raw"]["sum"] for d in described)
        count = sum(d["raw"]["count"] for d in described)
        return {"mean": total / max(count, 1), "count": count}

    @classmethod
    def describe(cls, summary: dict) -> str:
        return f"{summary['mean']:.3f} over {summary['count']} px"


@pytest.fixture
def raw_writer():
    from eoscale.infer.outputs import writer_class

    before = writer_class("values")  # eoscale's own (eoscale.infer.outputs.values), put back afterwards
    register_writer("values", RawWriter)
    yield RawWriter
    register_writer("values", before)


def _with_target(checkpoint: Path, path: Path, target: object) -> Path:
    saved = torch.load(checkpoint, weights_only=True)
    if target is None:
        saved[CONTRACT_KEY].pop("target", None)
    else:
        saved[CONTRACT_KEY]["target"] = target
    torch.save(saved, path)
    return path


def test_a_stub_writer_makes_the_maps_of_its_target_kind(raw_writer, checkpoint, scene, tmp_path):
    values = _with_target(checkpoint, tmp_path / "values.ckpt", "values")
    out = tmp_path / "maps"
    result = predict(PredictConfig(checkpoint=str(values), inputs=[str(scene)], output=str(out), progress=False))
    assert result.target == "values"
    assert sorted(p.name for p in out.iterdir()) == ["odd_raw.tif"]  # no class map, no work folder left
    with rasterio.open(out / "odd_raw.tif") as src:
        assert src.dtypes[0] == "float32" and src.nodata == NODATA and (src.height, src.width) == (301, 347)
        assert src.tags()[TARGET_TAG] == "values" and "EOSCALE_LINEAGE" in src.tags()
        raw = src.read(1)
    valid = raw != NODATA
    assert not valid[40:90, 0:70].any() and valid.sum() == 301 * 347 - 50 * 70
    assert result.scenes[0].areas == pytest.approx({"mean": float(raw[valid].mean()), "count": int(valid.sum())})
    # raw logits, not probabilities: the writer's `activate` (the contract's, for "values") is the identity
    assert raw[valid].min() < 0 or raw[valid].max() > 1
    # maps of another kind are not class maps: sample, assess and mosaic refuse them in one line
    from eoscale.maps.classmap import open_map
    from eoscale.maps.mosaic import read_map

    for read in (open_map, read_map):
        with pytest.raises(InputError, match="holds 'values', not classes"):
            read(out / "odd_raw.tif")
    console = Console(record=True, width=200)
    print_summary(result.scenes, out, console=console, target=result.target)
    text = console.export_text()
    assert "mean value" in text and "over" in text and "raw maps in" in text


def test_the_class_writer_is_the_writer_of_classes():
    contract = BandContract(("B02",), (0.0,), (1.0,), 32, ({"code": 1, "name": "a", "color": "#000000"},))
    assert contract.target == "classes" and writer_for(contract) is ClassWriter
    change = BandContract(("B02",), (0.0,), (1.0,), 32, (), target="change")
    assert writer_for(change) is ChangeWriter
    unregister_writer("change")  # a known kind whose writer is not registered
    try:
        with pytest.raises(InputError, match="no output writer for target kind 'change'") as err:
            writer_for(change)
    finally:
        register_writer("change", ChangeWriter)
    assert "\n" not in str(err.value)


def test_a_checkpoint_without_a_target_kind_holds_classes(checkpoint, tmp_path):
    old = _with_target(checkpoint, tmp_path / "old.ckpt", None)
    assert "target" not in torch.load(old, weights_only=True)[CONTRACT_KEY]
    contract = read_contract(old)
    assert contract.target == "classes" and contract.to_dict()["target"] == "classes"
    assert BandContract.from_dict(contract.to_dict()) == contract


def test_an_unknown_target_kind_is_refused_in_one_line(checkpoint, scene, tmp_path, capsys):
    odd = _with_target(checkpoint, tmp_path / "odd.ckpt", "elevation")
    code = main(["predict", "--checkpoint", str(odd), "--input", str(scene), "--output", str(tmp_path / "maps")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err
    assert "'elevation'" in err and all(kind in err for kind in TARGET_KINDS)
    assert not (tmp_path / "maps").exists() or not any((tmp_path / "maps").glob("*.tif"))


def test_a_known_kind_without_a_writer_is_refused_in_one_line(checkpoint, scene, tmp_path, capsys):
    change = _with_target(checkpoint, tmp_path / "change.ckpt", "change")
    unregister_writer("change")  # a known kind whose writer is not registered
    try:
        code = main(["predict", "--checkpoint", str(change), "--input", str(scene), "--output", str(tmp_path / "maps")])
    finally:
        register_writer("change", ChangeWriter)
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and "no output writer for target kind 'change'" in err


def test_serving_takes_every_date_of_a_season_model():
    """Serve refused temporal models before issue 47 (this test asserted the refusal); it now takes every date's bands
    (and their `dates` for a network that reads them: tests/serve/test_serve_temporal.py)."""
    from eoscale.serve.landcover import ServedModel

    contract = BandContract(("B02",), (0.0,), (1.0,), 32, ({"code": 1, "name": "a", "color": "#000000"},),
                            time_steps=3)
    inputs, _ = ServedModel("season", torch.nn.Conv2d(3, 1, 1), contract, {}).tensors()
    assert [(t.name, tuple(t.shape)) for t in inputs] == [("windows", (3, 32, 32)), ("valid", (32, 32))]
