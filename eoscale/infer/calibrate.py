"""`eoscale calibrate CKPT --store STORE`: fit a class checkpoint's temperature on a tile store's split, after the fact.

    eoscale calibrate runs/best.ckpt --store runs/tiles.zarr                  # writes runs/best.calibrated.ckpt
    eoscale calibrate runs/best.ckpt --store runs/tiles.zarr --overwrite      # rewrites runs/best.ckpt in place
    eoscale calibrate runs/best.ckpt --store other.zarr --split test --output runs/recalibrated.ckpt

What `eoscale fit` does at each validation (`eoscale.train.callbacks.calibration`), for a checkpoint trained before,
fine-tuned elsewhere or to be recalibrated on other data: the split's tiles come through `TileDataModule` as in
`predict --store` (the checkpoint's bands, the store's normalisation, nodata ignored), a reproducible sample of at most
`--pixels` labelled pixels is kept (`eoscale.models.calibration.PixelSample`), the temperature is fitted on it
(L-BFGS on the NLL, Guo et al. 2017), and the expected calibration error before and after is printed and logged to
MLflow (experiment `eoscale-calibrate`: `ece_before`, `ece_after`, `temperature`, `nll_before`, `nll_after`).

The temperature goes into the checkpoint's band contract (`BandContract.temperature`), which `predict` and `serve`
divide the logits by before the softmax; nothing else in the file changes. The new file is written beside its
destination and renamed into place (never half-written); a checkpoint is replaced only with `--overwrite`, and a
sharded checkpoint folder is refused (`eoscale consolidate` makes one file of it first).
"""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import nullcontext
from pathlib import Path

import torch

from eoscale.classes import IGNORE_INDEX
from eoscale.contract import CONTRACT_KEY, BandContract, load_checkpoint
from eoscale.errors import InputError, OutputExistsError
from eoscale.models.calibration import (
    MAX_PIXELS,
    PixelSample,
    clamp_message,
    clamp_temperature,
    fit_log_temperature,
    nll,
    temperature_of,
)
from eoscale.models.uncertainty import ECE_BINS, CalibrationBins
from eoscale.paths import Paths

EXPERIMENT = "eoscale-calibrate"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", action=Paths, metavar="CKPT", help="an eoscale checkpoint file of a class model")
    parser.add_argument("--store", required=True, action=Paths, metavar="STORE", help="the tile store whose split the temperature is fitted on")
    parser.add_argument("--split", default="val", help="the store's split to fit on (default: val)")
    parser.add_argument("--output", default=None,
                        help="where the calibrated checkpoint goes (default: CKPT's name + .calibrated.ckpt beside it)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the output if it exists; without --output, rewrite CKPT itself")
    parser.add_argument("--pixels", type=int, default=MAX_PIXELS,
                        help=f"labelled pixels the fit keeps at most, a reproducible sample (default: {MAX_PIXELS})")
    parser.add_argument("--bins", type=int, default=ECE_BINS, help=f"confidence bins of the ECE (default: {ECE_BINS})")
    parser.add_argument("--batch-size", type=int, default=16, help="tiles a forward pass (default: 16)")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"), help="where the network runs")
    parser.add_argument("--tracking-uri", default=None,
                        help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///<output folder>/mlflow.db)")


def output_path(checkpoint: Path, output: str | None, *, overwrite: bool) -> Path:
    """Where the calibrated checkpoint goes; OutputExistsError for an existing file unless `overwrite`."""
    if output is None:
        target = checkpoint if overwrite else checkpoint.with_name(f"{checkpoint.stem}.calibrated.ckpt")
    else:
        target = Path(output)
    if target.exists() and not overwrite:
        raise OutputExistsError(f"{str(target)!r} exists: pass --overwrite to replace it, or --output another file")
    if target.is_dir():
        raise InputError(f"--output {str(target)!r} is a folder: name a checkpoint file")
    return target


def sample_split(model, store: str | Path, *, split: str, limit: int, batch_size: int) -> PixelSample:
    """A reproducible sample of the labelled pixels of `split` and the network's logits for them."""
    from eoscale.data.datamodule import TileDataModule

    data = TileDataModule(store, batch_size=batch_size, num_workers=0, bands=list(model.contract.bands),
                          labels=True, augment=False, predict_split=split)
    model.contract.check(BandContract.from_datamodule(data), what=f"checkpoint {str(model.checkpoint)!r}")
    data.setup("predict")
    sample = PixelSample(limit=limit, seed=0, ignore_index=IGNORE_INDEX)
    device = model.device
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else nullcontext()
    with torch.inference_mode(), data.predict_dataloader() as loader:
        for batch in loader:
            batch = data.normalise({k: v.to(device, non_blocking=True) for k, v in batch.items()})
            with autocast:
                logits = model.network(batch["image"])
            sample.add(logits.float().cpu(), batch["label"].cpu())
    return sample


def calibrate(model, store: str | Path, *, split: str = "val", limit: int = MAX_PIXELS, bins: int = ECE_BINS,
              batch_size: int = 16) -> dict:
    """Fit the temperature of `model` (an `eoscale.infer.model.PredictionModel`) on `split` of `store`:
    `{temperature, ece_before, ece_after, nll_before, nll_after, pixels, seen}`."""
    if model.contract.target != "classes":
        raise InputError(f"checkpoint {str(model.checkpoint)!r} maps {model.contract.target!r}: a temperature "
                         "calibrates class probabilities only")
    sample = sample_split(model, store, split=split, limit=limit, batch_size=batch_size)
    if len(sample) == 0:
        raise InputError(f"split {split!r} of {str(store)!r} has no labelled pixels to calibrate on: name another "
                         "with --split")
    logits, labels = sample.tensors()
    temperature, clamped = clamp_temperature(temperature_of(fit_log_temperature(logits, labels)))
    found = {"temperature": temperature, "pixels": len(sample), "seen": sample.seen,
             **({"clamped": clamped} if clamped else {})}
    for when, t in (("before", 1.0), ("after", temperature)):
        calibration = CalibrationBins(bins)
        calibration.add_probs(torch.softmax(logits / t, 1).T.numpy(), labels.numpy())
        found[f"ece_{when}"] = calibration.ece()
        found[f"nll_{when}"] = nll(logits, labels, temperature=t)
    return found


def write_temperature(checkpoint: Path, target: Path, temperature: float, calibration: dict) -> None:
    """Write `checkpoint` with the temperature in its band contract to `target`: a temporary file beside it, renamed
    into place (on the same file system, so a reader sees the old file or the new one, never half of one)."""
    saved = load_checkpoint(checkpoint)
    contract = BandContract.from_dict(saved[CONTRACT_KEY])
    saved[CONTRACT_KEY] = BandContract.from_dict({**contract.to_dict(), "temperature": temperature,
                                                  "calibration": calibration}).to_dict()
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
    try:
        torch.save(saved, partial)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def run(args: argparse.Namespace) -> int:
    from eoscale.infer.model import load_model
    from eoscale.infer.run import pick_device
    from eoscale.infer.tracking import log_evaluation

    checkpoint = Path(args.checkpoint)
    if checkpoint.is_dir():
        raise InputError(f"{str(checkpoint)!r} is a sharded checkpoint folder: run 'eoscale consolidate' on it first "
                         "and calibrate the file it writes")
    if args.pixels < 1 or args.bins < 1:
        raise InputError(f"--pixels {args.pixels} and --bins {args.bins}: both must be at least 1")
    target = output_path(checkpoint, args.output, overwrite=args.overwrite)
    model = load_model(checkpoint, device=pick_device(args.device, 0))
    found = calibrate(model, args.store, split=args.split, limit=args.pixels, bins=args.bins,
                      batch_size=args.batch_size)
    calibration = {"pixels": found["pixels"], "ece_before": found["ece_before"], "ece_after": found["ece_after"],
                   "by": "calibrate", "store": str(Path(args.store).resolve()), "split": args.split,
                   **({"clamped": found["clamped"]} if "clamped" in found else {})}
    if "clamped" in found:
        print(f"warning: {clamp_message(found['clamped'])}", file=sys.stderr)
    write_temperature(checkpoint, target, found["temperature"], calibration)
    print(f"temperature {found['temperature']:.3f} fitted on {found['pixels']} of {found['seen']} labelled "
          f"{args.split} pixels: expected calibration error {found['ece_before']:.4f} -> {found['ece_after']:.4f}, "
          f"NLL {found['nll_before']:.4f} -> {found['nll_after']:.4f}")
    print(f"wrote {target}")
    params = {"checkpoint": str(checkpoint.resolve()), "output": str(target.resolve()), "store": calibration["store"],
              "split": args.split, "bins": args.bins, "backbone": model.backbone}
    metrics = {k: float(found[k]) for k in ("temperature", "ece_before", "ece_after", "nll_before", "nll_after")}
    metrics["pixels"] = float(found["pixels"])
    if "clamped" in found:
        params["temperature_clamped"] = clamp_message(found["clamped"])
    run_id = log_evaluation(target.parent, args.tracking_uri, params, metrics, experiment=EXPERIMENT,
                            run_name=f"calibrate-{args.split}")
    if run_id:
        print(f"MLflow run {run_id} (experiment {EXPERIMENT!r})")
    return 0
