"""Self-distillation pretraining (`eoscale.train.tasks.dino`) through the real `eoscale pretrain`: its loss is finite, the
teacher follows the student, and the student's encoder is exported with its band contract like MAE's."""

from __future__ import annotations

import pytest
import torch

from eoscale.cli import main
from eoscale.models.foundation import read_export_metadata
from tests.stores import make_store

TINY_VIT = ["--model.init_args.backbone", "vit_tiny_patch16_224",
            "--model.init_args.backbone_kwargs", "{patch_size: 8, depth: 1, embed_dim: 32, num_heads: 2}",
            "--model.init_args.out_dim", "64", "--model.init_args.hidden_dim", "32", "--model.init_args.bottleneck_dim", "16"]


def test_dino_pretrain_exports_the_student(tmp_path):
    from eoscale.train.tasks.dino import SelfDistillation

    store = make_store(tmp_path / "s")
    root = tmp_path / "dino"
    code = main(["pretrain", "--config", "configs/dino_pretrain.yaml", "--data.init_args.store", str(store),
                 "--trainer.default_root_dir", str(root), "--checkpoint.dirpath", str(root / "checkpoints"),
                 "--trainer.max_steps", "3", "--trainer.val_check_interval", "3", "--trainer.num_sanity_val_steps", "0",
                 "--trainer.enable_progress_bar", "false", "--data.init_args.batch_size", "4",
                 "--data.init_args.num_workers", "0", *TINY_VIT])
    assert code == 0
    export = root / "checkpoints" / "backbone.safetensors"
    meta = read_export_metadata(export)
    assert meta["in_chans"] == 10 and len(meta["bands"]) == 10 and meta["steps"] == 3
    ckpt = torch.load(next((root / "checkpoints").glob("*.ckpt")), map_location="cpu", weights_only=True)
    state = ckpt["state_dict"]
    student, teacher = state["model.backbone.net.blocks.0.attn.qkv.weight"], state["model.teacher_backbone.net.blocks.0.attn.qkv.weight"]
    assert not torch.equal(student, teacher)  # both moved, the teacher by EMA only
    assert SelfDistillation  # the module imports lightly's parts


def test_bad_crop_scale_is_one_line(capsys, tmp_path):
    code = main(["pretrain", "--config", "configs/dino_pretrain.yaml", "--model.init_args.crop_scale", "0",
                 "--data.init_args.store", str(make_store(tmp_path / "s")), "--trainer.default_root_dir", str(tmp_path)])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(err) == 1, err


pytestmark = pytest.mark.filterwarnings("ignore")


def test_dino_is_no_mae_and_the_pipeline_refuses_it_in_both_checks():
    """DINO shares the pretraining base with MAE, not MAE's class; the pipeline strategy, which cuts an MAE into
    stages, refuses it alike from a config (before any rank starts) and from a built task (`connect`)."""
    from eoscale.errors import InputError
    from eoscale.train.strategies.pipeline import PipelineStrategy, refuse_task
    from eoscale.train.tasks.dino import DINOTask
    from eoscale.train.tasks.mae import MAETask
    from eoscale.train.tasks.pretraining import PretrainTask

    assert issubclass(DINOTask, PretrainTask) and not issubclass(DINOTask, MAETask)
    refuse_task("eoscale.train.tasks.mae.MAETask")  # a class path names the class (old paths: test_train_aliases)
    for given in ("eoscale.train.tasks.dino.DINOTask", DINOTask):
        with pytest.raises(InputError, match="pipelines MAE pretraining only, not DINOTask"):
            refuse_task(given)
    with pytest.raises(InputError, match="pipelines MAE pretraining only, not DINOTask"):
        PipelineStrategy().connect(DINOTask())
