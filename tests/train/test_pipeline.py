"""Pipeline-parallel MAE pretraining (eoscale.train.strategies.pipeline) at W=2 on CPU (gloo): GPipe and 1F1B against one
process, the whole-model checkpoint and its resumption, the exported backbone in `fit`, bad configurations.

One torchrun of two ranks (`tests.train.pipeline_fits`) pretrains a tiny MAE (3 encoder + 1 decoder blocks, two
stages) as a user would; the reference pretraining runs in this process on one device: pipeline stages read the
same batches as one process, and the masking is drawn from the seed and the step on every stage.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from eoscale.cli import main as eoscale_main
from tests.processes import torchrun
from tests.train.pipeline_fits import STEPS, TINY, pretrain_args
from tests.train.strategy_fits import CONFIGS

EXPORT = Path("checkpoints") / "backbone.safetensors"


@pytest.fixture(scope="module")
def pipeline_run(store: Path, tmp_path_factory) -> Path:
    """The folder the torchrun of two CPU ranks wrote (tests.train.pipeline_fits)."""
    root = tmp_path_factory.mktemp("pipeline")
    result = torchrun("tests.train.pipeline_fits", [str(root), str(store)], root)
    assert result.returncode == 0, result.stderr[-4000:]
    return root


@pytest.fixture(scope="module")
def one_process(store: Path, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("pipeline-one")
    assert eoscale_main(pretrain_args(str(store), root, "one", schedule=None, devices=1)) == 0
    return root / "one"


def _load(path: Path) -> dict:
    return torch.load(path, weights_only=True)


@pytest.mark.slow
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_pipeline_matches_one_process(schedule: str, pipeline_run: Path, one_process: Path):
    one = _load(one_process / "probe" / "rank0.pt")
    ranks = [_load(pipeline_run / schedule / "probe" / f"rank{r}.pt") for r in (0, 1)]
    for rank in ranks:
        assert rank["world_size"] == 2 and rank["step"] == STEPS and len(rank["losses"]) == STEPS
        # 2 microbatches of 2 tiles, fp32, clipping on: measured within 4e-7 of one process over 8 steps
        torch.testing.assert_close(torch.tensor(rank["losses"]), torch.tensor(one["losses"]), rtol=0, atol=1e-5)
        # the stages share each batch: the global batch and the samples counted are one process's
        assert rank["counted"] == one["counted"] and one["counted"]["epoch_samples"] > 0
    # each stage holds its own blocks, the two together the whole model; state bytes likewise
    assert ranks[0]["local"] + ranks[1]["local"] == one["local"] and ranks[0]["local"] and ranks[1]["local"]
    assert ranks[0]["state"]["total"] + ranks[1]["state"]["total"] == pytest.approx(one["state"]["total"], rel=1e-3)
    # both stages hold encoder blocks, and the exported encoder is whole: the one process's
    held = [{n for n in _load(pipeline_run / schedule / "report" / f"rank{r}.pt")["local"]
             if n.startswith("model.backbone.net.blocks.")} for r in (0, 1)]
    assert held[0] and held[1] and not held[0] & held[1]
    exported, expected = load_file(pipeline_run / schedule / EXPORT), load_file(one_process / EXPORT)
    assert exported.keys() == expected.keys()
    for key, value in expected.items():
        torch.testing.assert_close(exported[key], value, rtol=0, atol=1e-5, msg=key)


@pytest.mark.slow
def test_checkpoint_holds_the_whole_model_and_resumes(pipeline_run: Path, one_process: Path):
    saved = _load(pipeline_run / "1f1b" / "checkpoints" / "last.ckpt")
    reference = _load(one_process / "checkpoints" / "last.ckpt")
    assert {k: v.shape for k, v in saved["state_dict"].items()} == {k: v.shape for k, v in reference["state_dict"].items()}
    assert len(saved["optimizer_states"][0]["pipeline_stages"]) == 2  # each stage's AdamW state
    # resumed on two ranks: each stage starts from the parameters the fit ended with, and trains on
    for rank in (0, 1):
        ended = _load(pipeline_run / "1f1b" / "report" / f"rank{rank}.pt")
        started = _load(pipeline_run / "resumed" / "report" / f"startrank{rank}.pt")
        assert started["step"] == STEPS and started["local"].keys() == ended["local"].keys()
        for name, value in ended["local"].items():
            torch.testing.assert_close(started["local"][name], value, rtol=0, atol=0, msg=name)
    assert _load(pipeline_run / "resumed" / "probe" / "rank0.pt")["step"] == STEPS + 1


@pytest.mark.slow
def test_exported_backbone_loads_in_fit(pipeline_run: Path, store: Path, tmp_path: Path):
    export = pipeline_run / "1f1b" / EXPORT
    assert eoscale_main([
        "fit", "--config", str(CONFIGS / "full_finetune.yaml"), "--model.init_args.weights", str(export),
        "--model.init_args.backbone_kwargs", TINY[1], "--model.init_args.decoder_channels", "16",
        "--data.init_args.store", str(store), "--data.init_args.batch_size", "4", "--data.init_args.num_workers", "0",
        "--trainer.accelerator", "cpu", "--trainer.devices", "1", "--trainer.max_steps", "1",
        "--trainer.limit_val_batches", "0", "--trainer.enable_progress_bar", "false", "--trainer.logger", "false",
        "--trainer.default_root_dir", str(tmp_path), "--checkpoint.dirpath", str(tmp_path / "checkpoints"),
        "--trainer.callbacks+=tests.train.helpers.RankReport", f"--trainer.callbacks.folder={tmp_path / 'report'}",
    ]) == 0
    started = _load(tmp_path / "report" / "startrank0.pt")["local"]
    weights = load_file(export)
    for key in ("blocks.0.attn.qkv.weight", "blocks.2.mlp.fc2.weight", "pos_embed"):
        torch.testing.assert_close(started[f"model.backbone.net.{key}"], weights[key], rtol=0, atol=0, msg=key)


@pytest.mark.slow
def test_plan_predicts_the_heaviest_stage(pipeline_run: Path, store: Path, tmp_path: Path):
    from eoscale.train.planning.model_facts import facts_from_config
    from eoscale.train.planning.plan import estimate

    tiny = tmp_path / "tiny.yaml"  # the torchrun's model and batch as a config
    tiny.write_text(f"model:\n  init_args:\n    backbone_kwargs: {TINY[1]}\n    decoder_dim: 32\n    decoder_depth: 1\n"
                    f"    decoder_heads: 2\ndata:\n  init_args:\n    store: {store}\n    batch_size: 4\n")
    facts = facts_from_config([str(CONFIGS / "mae_pretrain.yaml"), str(tiny)])
    assert len(facts.pipeline_blocks) == 4 and sum(facts.pipeline_blocks) == facts.params
    measured = max(_load(pipeline_run / "gpipe" / "probe" / f"rank{r}.pt")["state"]["total"] for r in (0, 1))
    predicted = estimate(facts, "pipeline", 2, precision="32-true").state
    assert predicted == pytest.approx(measured, rel=0.1)


PIPELINE = ["--config", str(CONFIGS / "strategy" / "pipeline.yaml")]
STRATEGY = "--trainer.strategy.init_args."
CASES = {
    "not MAE": (["fit", "--config", str(CONFIGS / "smoke.yaml"), *PIPELINE],
                "the pipeline strategy pipelines MAE pretraining only, not SegmentationTask: use 'eoscale pretrain' "
                "with an MAE config, or another configs/strategy fragment"),
    "stages > blocks": (["pretrain", "--config", str(CONFIGS / "mae_pretrain.yaml"), *PIPELINE, *TINY,
                         "--trainer.devices", "5", f"{STRATEGY}microbatches", "8"],
                        "5 pipeline stages for 4 blocks (3 encoder + 1 decoder): use at most 4 ranks "
                        "(trainer.devices × num_nodes) or more blocks"),
    "microbatches": (["pretrain", "--config", str(CONFIGS / "mae_pretrain.yaml"), *PIPELINE,
                      "--trainer.devices", "2", f"{STRATEGY}microbatches", "3"],
                     "pipeline microbatches=3 does not divide the batch size 64: choose a divisor of "
                     "data.init_args.batch_size"),
    "1f1b": (["pretrain", "--config", str(CONFIGS / "mae_pretrain.yaml"), *PIPELINE, "--trainer.devices", "4",
              f"{STRATEGY}microbatches", "2"],
             "the 1f1b schedule needs at least as many microbatches as stages (4), got 2: raise microbatches or use "
             "schedule gpipe"),
    "schedule": (["pretrain", "--config", str(CONFIGS / "mae_pretrain.yaml"), *PIPELINE, f"{STRATEGY}schedule", "zb"],
                 "pipeline schedule='zb' is not one of gpipe, 1f1b"),
}


@pytest.mark.parametrize("case", CASES)
def test_bad_pipeline_configuration_is_one_line(case: str, store: Path, tmp_path: Path, capsys):
    args, message = CASES[case]
    code = eoscale_main([*args, "--data.init_args.store", str(store), "--trainer.accelerator", "cpu",
                         "--trainer.default_root_dir", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.splitlines() == [f"eoscale {args[0]}: error: {message}"]
    assert not list(tmp_path.iterdir())  # nothing written
