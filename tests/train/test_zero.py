"""DeepSpeed ZeRO-2/3 beside DDP and FSDP2 at W=2 on CPU (gloo), and `eoscale plan` against what each rank holds.

One torchrun of two ranks runs `eoscale fit` of a tiny ViT under each strategy in turn (`tests.train.strategy_fits`),
10 steps each, fp32, gradient clipping on; the tests read what each rank wrote.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import rasterio
import torch

from eoscale.cli import main as eoscale_main
from eoscale.errors import InputError
from eoscale.train.planning.plan import estimate
from eoscale.train.strategies.consolidate import consolidate
from tests.processes import torchrun
from tests.train.strategy_fits import CONFIGS, RESUMED, STEPS

STRATEGIES = ("ddp", "fsdp", "zero2", "zero3")
PLANNED = {"ddp": "ddp", "fsdp": "fsdp2", "zero2": "zero2", "zero3": "zero3"}


@pytest.fixture(scope="module")
def fitted(store: Path, tmp_path_factory) -> Path:
    """The folder of one torchrun of two CPU ranks that fitted each strategy (`<root>/<strategy>/`)."""
    root = tmp_path_factory.mktemp("strategies")
    result = torchrun("tests.train.strategy_fits", [str(root), str(store), *STRATEGIES, "zero3+resume"], root)
    assert result.returncode == 0, result.stderr[-4000:]
    printed = result.stdout + result.stderr
    assert "built successfully" not in printed  # no DeepSpeed op compiled
    for noise in ("Setting accelerator to CPU", "is deprecated", "handles gradient clipping internally"):
        assert noise not in printed, noise  # DeepSpeed's and Lightning's, silenced by eoscale.train.quiet and .zero
    return root


@pytest.fixture(scope="module")
def fits(fitted: Path) -> dict[str, dict[int, dict]]:
    """Each strategy's reports of rank 0 and 1."""
    return {s: {r: torch.load(fitted / s / "probe" / f"rank{r}.pt", weights_only=True) for r in (0, 1)}
            for s in STRATEGIES}


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["zero2", "zero3", "fsdp"])
def test_training_matches_ddp(fits, strategy: str):
    for rank in (0, 1):
        ddp, other = fits["ddp"][rank], fits[strategy][rank]
        assert other["world_size"] == 2 and other["step"] == STEPS and len(other["losses"]) == STEPS
        # fp32, same data and initial weights: sharding changes where the sums happen, not the training (measured:
        # within 4e-7 over the 10 steps). With 16 px patches the 32 px tiles were 2×2 tokens, and the decoder's
        # GroupNorm over 1×1 maps normalised two values a group: near-equal pairs turned the reduction-order
        # differences into 1e-3 of loss by step 9, under every strategy alike (tests/train/strategy_fits.VIT)
        losses, expected = torch.tensor(other["losses"]), torch.tensor(ddp["losses"])
        torch.testing.assert_close(losses, expected, rtol=0, atol=1e-4)
    assert fits["ddp"][0]["losses"] != fits["ddp"][1]["losses"]  # each rank saw its own batches


@pytest.mark.slow
def test_zero3_holds_half_the_parameters_per_rank(fits):
    total = fits["zero3"][0]["total"]
    assert total == fits["ddp"][0]["total"]
    for rank in (0, 1):
        assert abs(fits["zero3"][rank]["local"] / total - 0.5) < 0.01
        assert fits["zero2"][rank]["local"] == total  # ZeRO-2 keeps the parameters whole


@pytest.mark.slow
def test_zero_checkpoints_consolidate_into_files_that_predict(fitted: Path, store: Path, tmp_path: Path, capsys):
    (ddp,) = (fitted / "ddp").rglob("last.ckpt")
    ddp = torch.load(ddp, weights_only=True)
    for strategy in ("zero2", "zero3"):
        (folder,) = (fitted / strategy).rglob("last.ckpt")
        assert folder.is_dir() and (folder / "latest").is_file()  # DeepSpeed's sharded folder
        out = tmp_path / f"{strategy}.ckpt"
        capsys.readouterr()
        assert eoscale_main(["consolidate", str(folder), str(out)]) == 0
        assert capsys.readouterr().out.splitlines() == [f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB)"]
        full = torch.load(out, weights_only=True)  # plain data, as a DDP fit's checkpoint
        for key in ("eoscale", "eoscale_model", "hyper_parameters", "global_step", "eoscale_mlflow_run_id"):
            assert key in full and type(full[key]) is type(ddp[key]), key
        # the band contract as DDP's, but for the temperature: fitted on each fit's own val logits at its last
        # validation (ZeRO's and DDP's float steps differ in the last digits: 2.7e-9 apart in CI; and a checkpoint
        # saved before any validation carries none), it is not a fact of the store
        fitted_keys = ("temperature", "calibration")
        assert {k: v for k, v in full["eoscale"].items() if k not in fitted_keys} == \
            {k: v for k, v in ddp["eoscale"].items() if k not in fitted_keys}
        assert full["eoscale_model"] == ddp["eoscale_model"]
        # ZeRO-3's last.ckpt is its resumed fit's (test_zero3_resumes_...), in the same run's folder
        steps = STEPS + RESUMED if strategy == "zero3" else STEPS
        assert full["global_step"] == steps and "optimizer_states" not in full  # weights only
        # every rank's partition in its place: the same fp32 steps from the same start as DDP's 10 (the steps
        # differ by reduction order only: AdamW moves a weight at most lr = 1e-4 a step)
        assert full["state_dict"].keys() == ddp["state_dict"].keys()
        for name, value in full["state_dict"].items():
            assert value.dtype == torch.float32
            torch.testing.assert_close(value, ddp["state_dict"][name], rtol=0, atol=steps * 1e-4, msg=name)
        moved = max((v - ddp["state_dict"][k]).abs().max().item() for k, v in full["state_dict"].items())
        assert moved > 0  # not DDP's file under another name
    # a rank's partition missing: one line, nothing written
    broken = tmp_path / "broken.ckpt"
    shutil.copytree(folder, broken)
    next((broken / "checkpoint").glob("*rank_1_*optim_states.pt")).unlink()
    assert eoscale_main(["consolidate", str(broken), str(tmp_path / "broken.out")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"eoscale consolidate: error: cannot consolidate DeepSpeed checkpoint {str(broken)!r}")
    assert not (tmp_path / "broken.out").exists()
    # the ZeRO-3 file maps a scene like any eoscale checkpoint
    scene = store.parent / "scene0.tif"
    assert eoscale_main(["predict", "--checkpoint", str(out), "--input", str(scene), "--output", str(tmp_path / "maps"),
                         "--batch-size", "16"]) == 0
    with rasterio.open(scene) as src, rasterio.open(tmp_path / "maps" / "scene0_landcover.tif") as landcover:
        assert (landcover.crs, landcover.transform, landcover.shape) == (src.crs, src.transform, src.shape)
        classes = landcover.read(1)
        codes = {c["code"] for c in full["eoscale"]["classes"]}
        assert set(np.unique(classes[classes != landcover.nodata]).tolist()) <= codes
        assert (classes != landcover.nodata).mean() > 0.9  # all but the scene's nodata corner


@pytest.mark.slow
def test_zero3_resumes_from_its_folder_at_the_same_world_size(fitted: Path, fits):
    """`--ckpt_path last` on two ranks: both restore the sharded folder (each rank had looked for "last" in the folder
    its own MLflow logger named, and only rank 0's knows the run: rank 1 started afresh and the ranks hung)."""
    resumed = {r: torch.load(fitted / "zero3+resume" / "probe" / f"rank{r}.pt", weights_only=True) for r in (0, 1)}
    for rank in (0, 1):
        assert resumed[rank]["start_step"] == STEPS and resumed[rank]["step"] == STEPS + RESUMED
        assert len(resumed[rank]["losses"]) == RESUMED
    assert resumed[0]["run_id"] == fits["zero3"][0]["run_id"]  # the same MLflow run goes on


def test_consolidate_refuses_a_deepspeed_folder_missing_a_rank(tmp_path: Path, capsys):
    """A folder that names its tag but lacks the files: one line, nothing written."""
    folder = tmp_path / "last.ckpt"
    (folder / "checkpoint").mkdir(parents=True)
    (folder / "latest").write_text("checkpoint")
    assert eoscale_main(["consolidate", str(folder), str(tmp_path / "out.ckpt")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "no sharded checkpoint" in line and "DeepSpeed's 'latest'" in line
    assert not (tmp_path / "out.ckpt").exists()


def test_consolidate_reads_deepspeed_metadata_as_plain_data(tmp_path: Path):
    """A crafted model-states file is refused before DeepSpeed's loader (which unpickles) sees the folder."""
    from tests.test_safe_loading import Payload

    marker, folder = tmp_path / "pwned", tmp_path / "last.ckpt"
    (folder / "checkpoint").mkdir(parents=True)
    (folder / "latest").write_text("checkpoint")
    torch.save({"module": {}, "eoscale": Payload(marker)}, folder / "checkpoint" / "mp_rank_00_model_states.pt")
    with pytest.raises(InputError, match="cannot read checkpoint"):
        consolidate(folder, tmp_path / "out.ckpt")
    assert not marker.exists() and not (tmp_path / "out.ckpt").exists()


@pytest.fixture(scope="module")
def tiny_vit_config(store: Path, tmp_path_factory) -> list[str]:
    """The configs of the fits above, as `eoscale plan --config` takes them."""
    overlay = tmp_path_factory.mktemp("plan") / "tiny_vit.yaml"
    overlay.write_text("model:\n  init_args:\n    backbone: vit_tiny_patch16_224\n    backbone_kwargs: {depth: 4, patch_size: 8}\n"
                       f"    decoder_channels: 32\ndata:\n  init_args:\n    store: {store}\n    batch_size: 4\n")
    return [str(CONFIGS / "smoke.yaml"), str(overlay)]


@pytest.mark.slow
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_plan_predicts_each_ranks_state_within_10_percent(fits, tiny_vit_config, strategy: str):
    from eoscale.train.planning.model_facts import facts_from_config

    facts = facts_from_config(tiny_vit_config)
    assert facts.params == fits["ddp"][0]["total"]
    predicted = estimate(facts, PLANNED[strategy], 2, precision="32-true")
    for rank in (0, 1):
        measured = fits[strategy][rank]["state"]
        assert measured["total"] == pytest.approx(predicted.state, rel=0.10), (measured, predicted)


def test_meta_activations_equal_a_real_forward():
    from eoscale.models import build_model
    from eoscale.train.planning.model_facts import saved_activation_bytes

    kwargs = {"in_chans": 4, "num_classes": 3, "img_size": 32, "decoder_channels": 16, "depth": 2}
    torch.manual_seed(0)
    real = saved_activation_bytes(build_model("vit_tiny_patch16_224", **kwargs), in_chans=4, tile=32, device="cpu")
    with torch.device("meta"):
        meta = saved_activation_bytes(build_model("vit_tiny_patch16_224", **kwargs), in_chans=4, tile=32)
    assert real[1] > 0 and meta[1] == pytest.approx(real[1], rel=0.05)


def test_plan_command_prints_every_strategy_for_vit_l(store: Path, tmp_path: Path, capsys):
    overlay = tmp_path / "store.yaml"
    overlay.write_text(f"data:\n  init_args:\n    store: {store}\n")
    code = eoscale_main(["plan", "--config", str(CONFIGS / "vit_l16_seg.yaml"), "--config", str(overlay),
                         "--gpus-per-node", "4", "--gpu-memory", "40GB", "--nodes", "1,2"])
    out = capsys.readouterr().out
    assert code == 0
    assert "vit_large_patch16_224" in out and "bf16-mixed" in out
    rows = [line.split() for line in out.splitlines() if line.split()[:1] in (["1"], ["2"])]
    assert [r[2] for r in rows] == ["DDP", "FSDP2", "ZeRO-2", "ZeRO-3", "ZeRO-3+offload", "FSDP2×TP"] * 2
    params = float(out.split(" M parameters")[0].split()[-1])
    assert 300 < params < 320  # ViT-L/16's 304 M and the decoder
    ddp, zero3 = rows[6], rows[9]  # at 2 nodes (8 GPUs)
    assert float(zero3[3]) == pytest.approx(float(ddp[3]) / 16, rel=0.05)  # bf16 shards of fp32 weights, W=8


def test_the_vit_h_mae_config_plans_before_its_store_exists(tmp_path: Path, capsys):
    # a pretraining task has no classes: bands and tile size in a config are enough to plan it
    overlay = tmp_path / "shape.yaml"
    overlay.write_text("model:\n  init_args:\n    in_chans: 10\n    img_size: 224\n")
    config = str(CONFIGS / "mae_vit_h14_pretrain.yaml")
    assert eoscale_main(["plan", "--config", config, "--nodes", "1"]) == 2
    assert "set model.init_args.in_chans, model.init_args.img_size in a config" in capsys.readouterr().err
    assert eoscale_main(["plan", "--config", config, "--config", str(overlay), "--nodes", "1"]) == 0
    out = capsys.readouterr().out
    assert "vit_huge_patch14_224" in out and "batch 32 per GPU, bf16-mixed" in out
    assert 630 < float(out.split(" M parameters")[0].split()[-1]) < 700  # ViT-H/14's 632 M and the MAE decoder
    rows = {r[2]: r for r in (line.split() for line in out.splitlines()) if r[:1] == ["1"]}
    assert set(rows) == {"DDP", "FSDP2", "ZeRO-2", "ZeRO-3", "ZeRO-3+offload", "FSDP2×TP", "Pipeline"}
    assert all(r[9] == "yes" for r in rows.values())  # every strategy fits a 40 GB A100 (the config's comment)


def test_plan_refuses_bad_input_in_one_line(tmp_path: Path, capsys):
    assert eoscale_main(["plan", "--config", str(tmp_path / "none.yaml")]) == 2
    assert eoscale_main(["plan", "--config", str(CONFIGS / "smoke.yaml"), "--gpu-memory", "lots"]) == 2
    assert eoscale_main(["plan", "--config", str(CONFIGS / "smoke.yaml"), "--nodes", "0,2"]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert errors == [f"eoscale plan: error: no config file {str(tmp_path / 'none.yaml')!r}: give a YAML file such as "
                      "configs/vit_l16_seg.yaml",
                      "eoscale plan: error: --gpu-memory 'lots' is not a size: give it as 40GB or 80GiB",
                      "eoscale plan: error: --nodes '0,2' is not a list of node counts: give it as 1,2,4,16"]
