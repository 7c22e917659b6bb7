"""DeepSpeed ZeRO configurations that cannot run as written fail in one line (exit 2) before any rank starts.

Each is `eoscale fit` as a user types it, in this process: the check runs while the config is parsed, before the
model, the data or a process group exist (`eoscale.train.strategies.zero.check_strategy_choice`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eoscale.cli import main as eoscale_main
from tests.train.strategy_fits import CONFIGS

STRATEGY = CONFIGS / "strategy"
ZERO = "--trainer.strategy.init_args."


@pytest.fixture(scope="module")
def deepspeed_optimizer(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("ds") / "ds_config.json"
    path.write_text(json.dumps({"zero_optimization": {"stage": 2}, "optimizer": {"type": "Adam"}}))
    return path


CASES = {
    "stage 4": (["--config", str(STRATEGY / "zero2.yaml"), f"{ZERO}stage", "4"],
                "ZeRO stage=4 is not one of 1, 2, 3: use configs/strategy/zero2.yaml or zero3.yaml"),
    "parameter offload under ZeRO-2": (
        ["--config", str(STRATEGY / "zero2.yaml"), f"{ZERO}offload_parameters", "true"],
        "offload_parameters needs ZeRO stage 3 (stage=2 keeps whole parameters on every device): use "
        "configs/strategy/zero3_offload.yaml, or offload_optimizer alone"),
    "NVMe offload": (["--config", str(STRATEGY / "zero3_offload.yaml"), f"{ZERO}offload_optimizer_device", "nvme"],
                     "offload_optimizer_device='nvme': eoscale offloads to cpu only (NVMe offload needs DeepSpeed's "
                     "async_io op, compiled on first use)"),
    "offload under DDP": (["--config", str(STRATEGY / "ddp.yaml"), f"{ZERO}offload_optimizer", "true"],
                          "Option 'offload_optimizer' is not accepted: offloading is DeepSpeed ZeRO's "
                          "(--config configs/strategy/zero3_offload.yaml)"),
    "offload under FSDP2": (["--config", str(STRATEGY / "fsdp.yaml"), f"{ZERO}offload_parameters", "true"],
                            "Option 'offload_parameters' is not accepted: offloading is DeepSpeed ZeRO's "
                            "(--config configs/strategy/zero3_offload.yaml)"),
    "Lightning's DeepSpeed": (["--trainer.strategy", "deepspeed_stage_3_offload"],
                              "--trainer.strategy deepspeed_stage_3_offload: use eoscale's ZeRO fragments instead "
                              "(ZeRO 3 with offload: --config configs/strategy/zero2.yaml, zero3.yaml or "
                              "zero3_offload.yaml)"),
    "missing DeepSpeed config file": (
        ["--config", str(STRATEGY / "zero2.yaml"), f"{ZERO}config", "/no/ds_config.json"],
        "You passed in a path to a DeepSpeed config but the path does not exist: /no/ds_config.json"),
}


@pytest.mark.parametrize("case", [*CASES, "DeepSpeed optimizer"])
def test_bad_zero_configuration_is_one_line(case: str, store: Path, deepspeed_optimizer: Path, tmp_path: Path,
                                            capsys):
    if case == "DeepSpeed optimizer":
        extra, message = ["--config", str(STRATEGY / "zero2.yaml"), f"{ZERO}config", str(deepspeed_optimizer)], (
            "give the optimizer in the model's config (AdamW), not in the DeepSpeed config: DeepSpeed's own "
            "optimizers compile CUDA/C++ ops on first use")
    else:
        extra, message = CASES[case]
    try:
        code = eoscale_main(["fit", "--config", str(CONFIGS / "smoke.yaml"), "--data.init_args.store", str(store),
                             "--model.init_args.backbone", "test_resnet", "--trainer.max_steps", "1",
                             "--trainer.default_root_dir", str(tmp_path / "run"), *extra])
    except SystemExit as exit:  # the argument parser's own errors exit from inside it, as `eoscale fit` does
        code = exit.code
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].endswith(f"error: {message}"), err[0]
    assert not (tmp_path / "run").exists()  # nothing written
