"""An unlabelled store (`eoscale ingest` without `--labels`): `eoscale pretrain` reads it, `eoscale fit` refuses it
in one line."""

from __future__ import annotations

import pytest
import zarr

from eoscale import schema
from eoscale.cli import main
from eoscale.data.datamodule import TileDataModule
from tests.rasters import write_scene
from tests.stores import make_store

TINY_VIT = ["--model.init_args.backbone", "vit_tiny_patch16_224",
            "--model.init_args.backbone_kwargs", "{patch_size: 8, depth: 1, embed_dim: 32, num_heads: 2}"]
RUN = ["--trainer.max_steps", "2", "--trainer.val_check_interval", "2", "--trainer.num_sanity_val_steps", "0",
       "--trainer.enable_progress_bar", "false", "--data.init_args.batch_size", "4", "--data.init_args.num_workers", "0"]


@pytest.fixture(scope="module")
def unlabelled(tmp_path_factory):
    folder = tmp_path_factory.mktemp("unlabelled")
    scene = folder / "scene.tif"
    write_scene(scene, height=128, width=128, seed=3)
    store = folder / "tiles.zarr"
    code = main(["ingest", "--scenes", str(scene), "--output", str(store), "--tile-size", "32", "--workers", "1",
                 "--split-block", "1", "-q"])
    assert code == 0
    return store


def test_ingest_without_labels_writes_an_unlabelled_store(unlabelled, tmp_path):
    dm = TileDataModule(unlabelled, num_workers=0)
    assert not dm.labelled and dm.attrs[schema.ATTR_SPLITS]["train"][1] > 0
    labels = zarr.open_group(str(unlabelled), mode="r")[schema.LABELS][:]
    assert (labels == dm.ignore_index).all()
    assert TileDataModule(make_store(tmp_path / "labelled"), num_workers=0).labelled


def test_fit_on_an_unlabelled_store_is_one_line(unlabelled, tmp_path, capsys):
    code = main(["fit", "--config", "configs/full_finetune.yaml", "--data.init_args.store", str(unlabelled),
                 "--model.init_args.weights", "null", "--trainer.default_root_dir", str(tmp_path / "fit"), *TINY_VIT, *RUN])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(err) == 1 and "has no labels" in err[0] and "--labels" in err[0], err


def test_pretrain_reads_an_unlabelled_store(unlabelled, tmp_path):
    root = tmp_path / "mae"
    code = main(["pretrain", "--config", "configs/mae_pretrain.yaml", "--data.init_args.store", str(unlabelled),
                 "--trainer.default_root_dir", str(root), "--checkpoint.dirpath", str(root / "checkpoints"),
                 "--model.init_args.decoder_depth", "1", "--model.init_args.decoder_dim", "16", *TINY_VIT, *RUN])
    assert code == 0
    assert (root / "checkpoints" / "backbone.safetensors").stat().st_size > 0
