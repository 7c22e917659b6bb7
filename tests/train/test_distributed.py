"""Two CPU processes with gloo, started by Lightning's own launcher from `eoscale fit`: DDP and FSDP2; the step
breakdown of the DDP run, and `eoscale compare` of it beside a profiled one-process run in the same store."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from mlflow import MlflowClient

from eoscale.cli import main as eoscale_main
from eoscale.track.trace_summary import load_trace
from tests.processes import run_cli

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
PHASES = ("data_wait_s", "forward_backward_s", "optimizer_s")


def _fit(store: Path, root: Path, strategy: str, *extra: str, steps: int = 4, devices: int = 2) -> dict:
    """`eoscale fit` of `strategy` on `devices` CPU processes; each rank's `RankReport`."""
    root.mkdir(parents=True, exist_ok=True)
    report = root / "report"
    result = run_cli(["fit", "--config", str(CONFIGS / "smoke.yaml"), "--config", str(CONFIGS / "strategy" / f"{strategy}.yaml"),
                      "--data.init_args.store", str(store), "--data.init_args.batch_size", "4",
                      "--trainer.accelerator", "cpu", "--trainer.devices", str(devices), "--trainer.max_steps", str(steps),
                      "--trainer.val_check_interval", "2", "--trainer.default_root_dir", str(root),
                      "--trainer.callbacks+=tests.train.helpers.RankReport", f"--trainer.callbacks.folder={report}",
                      *extra], cwd=root)
    assert result.returncode == 0, result.stderr[-3000:]
    return {r: torch.load(report / f"rank{r}.pt", weights_only=True) for r in range(devices)} | {
        f"start{r}": torch.load(report / f"startrank{r}.pt", weights_only=True) for r in range(devices)} | {
        "printed": result.stdout + result.stderr}


@pytest.fixture(scope="module")
def ddp_run(store: Path, tmp_path_factory) -> tuple[Path, dict]:
    """Four steps of DDP on two gloo ranks, logging every 2 steps, with the progress bar; the run folder and
    reports."""
    root = tmp_path_factory.mktemp("ddp")
    return root, _fit(store, root, "ddp", "--trainer.log_every_n_steps", "2", "--trainer.enable_progress_bar", "true")


@pytest.mark.slow
def test_ddp_two_ranks_agree(ddp_run):
    _, ranks = ddp_run
    # same seed on every rank: the ranks start from the same weights, and DDP keeps them equal
    for name, value in ranks["start0"]["local"].items():
        torch.testing.assert_close(value, ranks["start1"]["local"][name], rtol=0, atol=0, msg=name)
    assert ranks[0]["world_size"] == 2 and ranks[0]["step"] == ranks[1]["step"] == 4
    for name, value in ranks[0]["local"].items():
        torch.testing.assert_close(value, ranks[1]["local"][name], rtol=0, atol=0, msg=name)
    assert ranks[0]["metrics"]["val_miou"] == ranks[1]["metrics"]["val_miou"]


@pytest.fixture(scope="module")
def fsdp_run(store: Path, tmp_path_factory) -> tuple[Path, dict]:
    """Four steps of FSDP2 (with activation checkpointing) on two gloo ranks; the run folder and reports."""
    root = tmp_path_factory.mktemp("fsdp")
    return root, _fit(store, root, "fsdp", "--trainer.strategy.init_args.activation_checkpointing", "true")


@pytest.mark.slow
def test_fsdp_two_ranks_hold_half_each(fsdp_run):
    tmp_path, ranks = fsdp_run
    assert ranks[0]["step"] == ranks[1]["step"] == 4
    total = ranks[0]["total"]
    held = [sum(v.numel() for v in ranks[r]["local"].values()) for r in (0, 1)]
    assert sum(held) == total  # every element on exactly one rank
    for local in held:  # FSDP2 cuts each tensor along dim 0; odd sizes leave the halves a little uneven
        assert abs(local / total - 0.5) < 0.05, local / total
    # the shards are different slices of one model, not two copies
    name = next(n for n, v in ranks[0]["local"].items() if v.numel() > 1000)
    assert not torch.equal(ranks[0]["local"][name], ranks[1]["local"][name])
    assert ranks[0]["metrics"]["val_miou"] == ranks[1]["metrics"]["val_miou"]
    # a sharded checkpoint folder: one file per rank, plus Lightning's metadata with our band contract
    (last,) = tmp_path.rglob("last.ckpt")
    assert last.is_dir() and len(list(last.glob("*.distcp"))) == 2
    assert torch.load(last / "meta.pt", weights_only=True)["eoscale"]["tile_size"] == 32


@pytest.mark.slow
def test_fsdp_resumes_on_another_world_size_and_consolidates(fsdp_run, store: Path, tmp_path: Path):
    run, _ = fsdp_run
    (sharded,) = run.rglob("last.ckpt")
    # one file of the two shards, through the eoscale command table
    consolidated = tmp_path / "full.ckpt"
    assert eoscale_main(["consolidate", str(sharded), str(consolidated)]) == 0
    full = torch.load(consolidated, weights_only=True)
    assert full["global_step"] == 4 and full["eoscale"]["bands"][0] == "B02"
    assert full["optimizer_states"][0]["state"]  # AdamW moments, keyed by parameter position

    # the sharded checkpoint of two ranks resumes on one rank: it starts from exactly the saved weights
    ranks = _fit(store, tmp_path / "one", "fsdp", "--ckpt_path", str(sharded), steps=6, devices=1)
    assert ranks["start0"]["step"] == 4 and ranks[0]["step"] == 6
    for name, value in ranks["start0"]["local"].items():
        torch.testing.assert_close(value, full["state_dict"][name], rtol=0, atol=0, msg=name)

    # the consolidated file resumes a plain single-device run
    ranks = _fit(store, tmp_path / "single", "ddp", "--ckpt_path", str(consolidated), "--trainer.strategy", "auto",
                 steps=6, devices=1)
    assert ranks["start0"]["step"] == 4 and ranks[0]["step"] == 6
    for name, value in ranks["start0"]["local"].items():
        torch.testing.assert_close(value, full["state_dict"][name], rtol=0, atol=0, msg=name)


# what a successful fit must not print (issue 13, fault 8): advertisements, third-party deprecations, MLflow's and
# Lightning's lines about creating a new store and experiment, "Epoch 0/-2" of a run bounded by steps, and
# Lightning's advice to log the epoch metrics with sync_dist=True (torchmetrics' compute() has all-reduced them
# already: following it would average them twice)
NOISE = ("litlogger", "LeafSpec", "`IterableDataset` has `__len__`", "Total FLOPs", "/-2", "Traceback",
         "srun` command is available", "Creating initial MLflow database tables", "not found. Creating it.",
         "sync_dist=True")


@pytest.mark.slow
def test_a_ddp_fit_prints_its_progress_and_no_known_noise(ddp_run):
    printed = ddp_run[1]["printed"]
    assert "Trainable params" in printed and "to step 4" in printed  # the summary and progress are still there
    found = [n for n in NOISE if n in printed]
    assert not found, f"noise {found} in:\n{printed[-3000:]}"


@pytest.mark.slow
def test_ddp_step_breakdown_adds_up_to_the_step(ddp_run):
    root, _ = ddp_run
    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("eoscale").experiment_id])
    history = {name: {m.step: m.value for m in client.get_metric_history(run.info.run_id, f"steptime/{name}")}
               for name in ("step_s", "data_wait_s", "forward_backward_s", "optimizer_s", "comm_s", "data_wait_share")}
    assert sorted(history["step_s"]) == [2, 4]  # every log_every_n_steps
    for step, total in history["step_s"].items():
        parts = history["data_wait_s"][step] + history["forward_backward_s"][step] + history["optimizer_s"][step]
        assert parts == pytest.approx(total, rel=0.10), (step, parts, total)
        assert 0 < history["comm_s"][step] and 0 <= history["data_wait_share"][step] <= 1
    assert run.data.params["run/world_size"] == "2" and run.data.params["run/launcher"] == "local"


@pytest.fixture(scope="module")
def single_run(ddp_run, store: Path) -> Path:
    """Six steps of one process with `--profile`, into the DDP run's folder and MLflow store."""
    root, _ = ddp_run
    result = run_cli(["fit", "--config", str(CONFIGS / "smoke.yaml"), "--data.init_args.store", str(store),
                      "--data.init_args.batch_size", "4", "--trainer.accelerator", "cpu", "--trainer.devices", "1",
                      "--trainer.max_steps", "6", "--trainer.val_check_interval", "3", "--trainer.log_every_n_steps", "2",
                      "--trainer.default_root_dir", str(root), "--profile"], cwd=root)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "eoscale: profile of steps 2-4" in result.stdout
    return root


@pytest.mark.slow
def test_a_profiled_fit_logs_its_trace_and_summary(single_run):
    client = MlflowClient(f"sqlite:///{single_run / 'mlflow.db'}")
    run = _runs(client)["1"]
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id, "profile")}
    assert artifacts == {"profile/rank0.pt.trace.json.gz", "profile/summary.md", "profile/summary.png"}
    (trace_path,) = (single_run / "profile").glob("*/rank0.pt.trace.json.gz")
    trace = load_trace(trace_path)  # gzipped Chrome trace JSON, as chrome://tracing and Perfetto read it
    steps = sorted(e["name"] for e in trace["traceEvents"] if e.get("name", "").startswith("ProfilerStep#"))
    assert steps == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]  # wait 1, warm-up 1, active 3
    assert any(e.get("name") == "[memory]" for e in trace["traceEvents"])  # profile_memory
    assert any("Input Dims" in e.get("args", {}) for e in trace["traceEvents"])  # record_shapes
    summary = (trace_path.parent / "summary.md").read_text()
    assert "Top CPU ops by self time" in summary and "aten::" in summary and "Memory peak" in summary
    assert "## Holistic Trace Analysis" in summary  # a CPU trace: HTA says why it has nothing to add


@pytest.mark.slow
def test_params_are_one_namespaced_set_with_a_description(single_run):
    client = MlflowClient(f"sqlite:///{single_run / 'mlflow.db'}")
    run = _runs(client)["1"]
    params = run.data.params
    assert not [k for k in params if k.rsplit(".", 1)[-1].rsplit("/", 1)[-1].startswith("_")]  # no CLI internals
    assert not [k for k in params if "." not in k and "/" not in k and k not in ("seed_everything", "ckpt_path",
                                                                               "model", "data", "best_checkpoint")]
    assert "data.augment" in params and "data/augment" not in params and "augment" not in params
    assert params["model"] == "eoscale.train.tasks.segmentation.SegmentationTask" and params["model.backbone"] == "resnet18"
    assert params["run/launcher"] == "local" and len(params["run/store_fingerprint"]) > 8
    assert params["profile.enabled"] == "True" and "trainer.max_steps" in params
    assert "trainer.benchmark" not in params  # left at its default: in config.yaml, not a param
    assert len(params) < 64, sorted(params)  # 60 with the fusion options (data.sensor_dropout, model.fusion…)
    assert "1 node(s) × 1 device(s)" in run.data.tags["mlflow.note.content"]


@pytest.mark.slow
def test_compare_shows_each_runs_data_wait_share(single_run, capsys):
    assert eoscale_main(["compare", "--root-dir", str(single_run), "--output", str(single_run / "compare")]) == 0
    printed = capsys.readouterr().out
    assert "data wait" in printed
    table = (single_run / "compare" / "comparison.csv").read_text().splitlines()
    header = table[0].split(",")
    rows = [dict(zip(header, line.split(","), strict=True)) for line in table[1:]]
    assert sorted(r["devices"] for r in rows) == ["1", "2"]
    for row in rows:
        assert 0 <= float(row["data_wait_share"]) <= 1, row
    md = (single_run / "compare" / "comparison.md").read_text()
    assert md.count("%") >= 2 and "Data wait" in md
    client = MlflowClient(f"sqlite:///{single_run / 'mlflow.db'}")
    assert all("compare/efficiency" in r.data.metrics for r in _runs(client).values())  # for MLflow's compare view


def _runs(client) -> dict:
    """The training runs of the store by world size."""
    runs = client.search_runs([client.get_experiment_by_name("eoscale").experiment_id])
    return {r.data.params["run/world_size"]: r for r in runs}
