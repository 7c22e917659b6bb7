"""MLflow stores holding runs with KNOWN params and metrics, written directly with `MlflowClient`.

Three runs of one model and data at 1, 2 and 4 devices with total throughputs 100, 190 and 360 samples/s
(efficiencies 1.0, 0.95, 0.90) and val_miou histories with known timestamps; a fourth run of another model
that logged no throughput and no val_miou (a crashed run), which must show as '–'.
"""

from __future__ import annotations

from pathlib import Path

T0 = 1_700_000_000_000  # ms: the runs' start times are T0 + an offset, as if they ran one after the other
DATA = {"data/bands": "B02,B03,B04", "data/tile_size": "32", "data/classes": "water,forest"}
# devices -> (total samples/s, val_miou history as (seconds after start, value), wall seconds, Slurm job)
KNOWN = {
    1: (100.0, [(600, 0.30), (1200, 0.50), (1800, 0.60)], 1800, "1001"),
    2: (190.0, [(300, 0.35), (600, 0.55), (900, 0.62)], 900, "1002"),
    4: (360.0, [(200, 0.40), (400, 0.56), (600, 0.58)], 600, "1003"),
}


def log_known_runs(uri: str, *, experiment: str = "eoscale", artifacts: Path | None = None) -> dict[str, str]:
    """The four runs in `experiment` at `uri`; returns {name: run id}."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    if artifacts is None and uri.startswith("sqlite:///"):  # beside the store, never ./mlruns of the cwd
        artifacts = Path(uri.removeprefix("sqlite:///")).parent / "mlartifacts"
    found = client.get_experiment_by_name(experiment)
    exp = found.experiment_id if found else client.create_experiment(
        experiment, artifact_location=artifacts.as_uri() if artifacts else None)
    ids = {}
    for i, (devices, (throughput, curve, wall, job)) in enumerate(KNOWN.items()):
        start = T0 + i * 10_000_000
        run = client.create_run(exp, start_time=start, run_name=f"ddp-{devices}", tags={"eoscale.command": "fit"})
        rid = run.info.run_id
        nodes = 2 if devices == 4 else 1
        params = {"run/model": "SegmentationTask", "run/backbone": "resnet18", "run/strategy": "DDPStrategy",
                  "run/world_size": devices, "run/num_nodes": nodes, "run/devices_per_node": devices // nodes,
                  "run/precision": "bf16-mixed", "run/global_batch_size": 16 * devices, "run/slurm_job_id": job, **DATA}
        for key, value in params.items():
            client.log_param(rid, key, value)
        # two epochs: the first (warm-up) is slower and must not count
        for step, factor in ((10, 0.5), (20, 1.0)):
            at = start + step * 1000
            client.log_metric(rid, "throughput/samples_per_s", throughput * factor, timestamp=at, step=step)
            client.log_metric(rid, "throughput/samples_per_s_device", throughput * factor / devices, timestamp=at, step=step)
            client.log_metric(rid, "time/epoch_s", 1000 / (throughput * factor), timestamp=at, step=step)
            client.log_metric(rid, "memory/peak_mb", 500.0 + 100 * devices * factor, timestamp=at, step=step)
            # the steady data-wait share (after the first window) is 0.1 per device: 10 %, 20 %, 40 %
            client.log_metric(rid, "steptime/data_wait_share", 0.1 * devices if factor == 1.0 else 0.9,
                              timestamp=at, step=step)
        for step, (seconds, value) in enumerate(curve):
            client.log_metric(rid, "val_miou", value, timestamp=start + seconds * 1000, step=step)
        client.set_terminated(rid, end_time=start + wall * 1000)
        ids[f"ddp-{devices}"] = rid
    # tagged as the training monitor writes Lightning's TrainerFn today
    crashed = client.create_run(exp, start_time=T0 + 50_000_000, run_name="crashed",
                                tags={"eoscale.command": "TrainerFn.FITTING"})
    client.log_param(crashed.info.run_id, "run/backbone", "vit_small_patch16_224")
    client.set_terminated(crashed.info.run_id, status="FAILED")
    ids["crashed"] = crashed.info.run_id
    # a `validate` run in the same experiment: not a training run, left out of an experiment's comparison
    other = client.create_run(exp, start_time=T0 + 60_000_000, run_name="validate", tags={"eoscale.command": "TrainerFn.VALIDATING"})
    client.set_terminated(other.info.run_id)
    ids["validate"] = other.info.run_id
    return ids
