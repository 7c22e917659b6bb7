"""Checkpoints in the exact format `eoscale fit` writes, without training.

`make_checkpoint` writes Lightning's `state_dict` with the task's `model.` prefix, `hyper_parameters` = the
task's hparams and the band contract under "eoscale"; the network is built by the training task itself from a
fixed seed. `TABLE` is the class table of `tests.rasters`, `MEAN`/`STD` roughly its scenes' statistics.
"""

from __future__ import annotations

from pathlib import Path

import torch

from eoscale.bands import SENTINEL2_NAMES
from eoscale.classes import ClassTable
from eoscale.contract import CONTRACT_KEY, BandContract
from tests.rasters import CLASSES_CSV

TILE = 32
TABLE = ClassTable.from_records(
    [dict(zip(("code", "name", "color"), line.split(","), strict=True)) for line in CLASSES_CSV.strip().splitlines()[1:]]
)
# roughly the statistics of tests.rasters scenes: 900 * (class + 1) + noise + 37 * band
MEAN = tuple(2250.0 + 37 * i for i in range(len(SENTINEL2_NAMES)))
STD = tuple(1000.0 for _ in SENTINEL2_NAMES)


def make_checkpoint(path: Path, *, backbone: str = "test_resnet", bands: tuple[str, ...] = SENTINEL2_NAMES,
                    tile: int = TILE, seed: int = 0) -> Path:
    from eoscale.train.tasks.segmentation import SegmentationTask

    task = SegmentationTask(backbone=backbone, decoder_channels=8, in_chans=len(bands), num_classes=len(TABLE),
                            img_size=tile, init_seed=seed)
    torch.manual_seed(seed)
    network = task.configure_models()
    contract = BandContract(tuple(bands), MEAN[: len(bands)], STD[: len(bands)], tile, tuple(TABLE.to_records()))
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({
        "epoch": 0, "global_step": 1, "pytorch-lightning_version": "2.6.6",
        "state_dict": {f"model.{k}": v for k, v in network.state_dict().items()},
        "hyper_parameters": dict(task.hparams),
        CONTRACT_KEY: contract.to_dict(),
    }, path)
    return path


def make_season_checkpoint(path: Path, *, time_steps: int, bands: tuple[str, ...] = SENTINEL2_NAMES,
                           mean: tuple[float, ...] = MEAN, std: tuple[float, ...] = STD,
                           sensors: list[dict] | None = None) -> Path:
    """A U-TAE checkpoint of `time_steps` dates (of several sensors where `sensors` lists their groups, the reference
    first), as `eoscale fit` writes it; untrained: a fixed seed's weights."""
    from eoscale.train.tasks.temporal import TemporalSegmentationTask

    task = TemporalSegmentationTask("utae", backbone="test_resnet", in_chans=len(bands), num_classes=len(TABLE),
                                    img_size=TILE, decoder_channels=8, time_steps=time_steps,
                                    backbone_kwargs={"n_head": 2, "d_k": 4, "d_model": 16, "out_indices": [1, 2]})
    torch.manual_seed(0)
    network = task.configure_models()
    contract = BandContract(tuple(bands), tuple(mean), tuple(std), TILE, tuple(TABLE.to_records()),
                            time_steps=time_steps, **({"sensor": sensors[0]["name"], "sensors": sensors} if sensors else {}))
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"epoch": 0, "global_step": 1, "pytorch-lightning_version": "2.6.6",
                "state_dict": {f"model.{k}": v for k, v in network.state_dict().items()},
                "hyper_parameters": dict(task.hparams), CONTRACT_KEY: contract.to_dict()}, path)
    return path


def make_adapted_checkpoint(root: Path, *, mean_shift: float = 0.0) -> tuple[Path, torch.nn.Module, dict]:
    """A ViT checkpoint in `<root>/exp/run/checkpoints/` and LoRA adapter 'alps' in `<root>/adapters/`, as a LoRA fit
    writes them: LoRA on qkv/proj and the head changed (so the adapter's map differs from the checkpoint's), and its
    store's statistics the checkpoint's with `mean_shift` added to each mean. The checkpoint, the unmerged adapted
    network, and the adapter's band contract."""
    from eoscale.infer.model import load_model
    from eoscale.models import build_model

    checkpoint = make_checkpoint(root / "exp" / "run" / "checkpoints" / "last.ckpt", backbone="test_vit")
    base = load_model(checkpoint)
    model = build_model(**base.spec["args"])
    model.load_state_dict({k.removeprefix("model."): v for k, v in torch.load(checkpoint)["state_dict"].items()})
    contract = write_adapter(model, base.contract, root, {"r": 2, "name": "alps"}, mean_shift=mean_shift)
    return checkpoint, model, contract


def write_adapter(model: torch.nn.Module, base_contract, root: Path, lora: dict, *, mean_shift: float) -> dict:
    """LoRA `lora` (apply_finetune's options, with its `name`) on `model`, its LoRA updates and head changed by a
    seeded random amount, saved as `<root>/adapters/<name>` with `base_contract`'s statistics plus `mean_shift` on
    each mean, as a LoRA fit writes it; returns the adapter's band contract (`model` is left adapted, unmerged)."""
    from eoscale.models.lora import apply_finetune, save_adapter

    apply_finetune(model, "lora", lora)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for key, p in model.named_parameters():
            if "lora_B" in key or key.startswith("decoder.classifier"):
                p.add_(torch.randn(p.shape, generator=generator) * 0.3)
    contract = base_contract.to_dict() | {"mean": [m + mean_shift for m in base_contract.mean]}
    save_adapter(model.eval(), root / "adapters" / lora["name"], contract=contract,
                 model_args={"backbone": "test_vit", "num_classes": 4, "img_size": 32})
    return contract
