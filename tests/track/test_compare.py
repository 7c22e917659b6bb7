"""`eoscale compare` on runs with known figures: efficiencies, time to target, device-hours, files, MLflow."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest

from eoscale.cli import main
from eoscale.errors import InputError, InputNotFoundError
from eoscale.track import compare as cmp


def _rows(uri, **kw):
    client = cmp.connect(uri)
    runs = cmp.find_runs(client, **{k: v for k, v in kw.items() if k in ("experiment", "run_ids")})
    comparison = cmp.compare_runs(client, runs, target_miou=kw.get("target_miou"))
    return comparison, {r.run_name: r for r in comparison.rows}


def test_efficiency_time_to_target_and_device_hours(sqlite_runs):
    uri, ids = sqlite_runs
    comparison, rows = _rows(uri, target_miou=0.55)
    assert set(rows) == {"ddp-1", "ddp-2", "ddp-4", "crashed"}  # the validate run is not a training run
    assert [rows[f"ddp-{n}"].efficiency for n in (1, 2, 4)] == pytest.approx([1.0, 0.95, 0.90])
    assert {rows[f"ddp-{n}"].baseline_run_id for n in (1, 2, 4)} == {ids["ddp-1"]}
    # the steady epoch (not the warm-up one) is the throughput
    assert [rows[f"ddp-{n}"].samples_per_s for n in (1, 2, 4)] == pytest.approx([100, 190, 360])
    assert rows["ddp-4"].samples_per_s_device == pytest.approx(90)
    assert rows["ddp-2"].epoch_s == pytest.approx(1000 / 190)
    # first val_miou >= 0.55, in seconds after the run started
    assert [rows[f"ddp-{n}"].time_to_target_s for n in (1, 2, 4)] == pytest.approx([1800, 600, 400])
    assert rows["ddp-4"].device_hours_to_target == pytest.approx(4 * 400 / 3600)
    # wall time × devices
    assert [rows[f"ddp-{n}"].device_hours for n in (1, 2, 4)] == pytest.approx([0.5, 0.5, 4 * 600 / 3600])
    assert [rows[f"ddp-{n}"].best_val_miou for n in (1, 2, 4)] == pytest.approx([0.60, 0.62, 0.58])
    assert rows["ddp-4"].peak_memory_mb == pytest.approx(900)
    assert (rows["ddp-4"].nodes, rows["ddp-4"].devices_per_node, rows["ddp-4"].global_batch) == (2, 2, 64)
    assert rows["ddp-4"].slurm_job_id == "1003" and rows["ddp-4"].precision == "bf16-mixed"
    crashed = rows["crashed"]
    assert crashed.model == "vit_small_patch16_224"
    assert crashed.samples_per_s is None and crashed.efficiency is None and crashed.best_val_miou is None
    assert cmp.format_value("efficiency", crashed.efficiency) == "–"


def test_data_wait_share_is_the_steady_state(sqlite_runs):
    uri, _ = sqlite_runs
    _, rows = _rows(uri)
    assert [rows[f"ddp-{n}"].data_wait_share for n in (1, 2, 4)] == pytest.approx([0.1, 0.2, 0.4])
    assert rows["crashed"].data_wait_share is None
    assert cmp.format_value("data_wait_share", 0.2) == "20%"


def test_default_target_is_the_level_every_run_reached(sqlite_runs):
    uri, ids = sqlite_runs
    comparison, rows = _rows(uri, run_ids=[ids["ddp-4"], ids["ddp-1"], ids["ddp-2"]])
    assert [r.run_name for r in comparison.rows] == ["ddp-4", "ddp-1", "ddp-2"]  # the order asked for
    assert comparison.target_miou == pytest.approx(0.58)
    assert [rows[f"ddp-{n}"].time_to_target_s for n in (1, 2, 4)] == pytest.approx([1800, 900, 600])


def test_cli_writes_table_files_and_a_comparison_run(sqlite_runs, tmp_path, capsys):
    from mlflow.tracking import MlflowClient

    uri, ids = sqlite_runs
    out = tmp_path / "compare"
    assert main(["compare", "--tracking-uri", uri, "--output", str(out), "--target-miou", "0.55"]) == 0
    printed = capsys.readouterr().out
    assert "ddp-4" in printed and "0.900" in printed and "–" in printed
    with (out / "comparison.csv").open() as f:
        table = {r["run_name"]: r for r in csv.DictReader(f)}
    assert float(table["ddp-2"]["efficiency"]) == pytest.approx(0.95)
    assert float(table["ddp-1"]["time_to_target_s"]) == pytest.approx(1800)
    assert table["crashed"]["samples_per_s"] == ""
    markdown = (out / "comparison.md").read_text()
    assert "| ddp-2 |" in markdown and "0.950" in markdown and "| crashed |" in markdown and "–" in markdown
    for name in ("scaling.png", "miou_time.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("eoscale-compare")
    store = cmp.sqlite_path(uri).parent
    assert experiment.artifact_location == (store / "mlartifacts").as_uri()  # beside the store, not the cwd
    (run,) = client.search_runs([experiment.experiment_id])
    compared = set(run.data.tags["eoscale.compared_runs"].split(","))
    assert compared == {ids["ddp-1"], ids["ddp-2"], ids["ddp-4"], ids["crashed"]}
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"comparison.csv", "comparison.md", "plots"} <= artifacts
    plots = {a.path for a in client.list_artifacts(run.info.run_id, "plots")}
    assert plots == {"plots/scaling.png", "plots/miou_time.png"}


def test_default_store_is_the_one_fit_writes(tmp_path, monkeypatch):
    """`--root-dir` (or the working directory) holds mlflow.db, as `eoscale fit` writes it."""
    from tests.mlflow_runs import log_known_runs

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    log_known_runs(f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.chdir(tmp_path)
    assert main(["compare", "--output", "out", "--no-log"]) == 0
    assert (tmp_path / "out" / "comparison.csv").is_file()
    assert cmp.default_tracking_uri(tmp_path) == f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://example.invalid:1")
    assert cmp.default_tracking_uri(tmp_path) == "http://example.invalid:1"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--runs", "0123456789abcdef0123456789abcdef"], "no MLflow run '0123456789abcdef"),
        (["--experiment", "nope"], "no experiment 'nope'"),
        (["--experiment", "empty"], "has no training runs"),
        (["--target-miou", "3"], "--target-miou must be in (0, 1]"),
    ],
)
def test_bad_input_is_one_line(sqlite_runs, tmp_path, capsys, args, message):
    uri, _ = sqlite_runs
    assert main(["compare", "--tracking-uri", uri, "--output", str(tmp_path / "o"), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_missing_store_and_unreachable_server(tmp_path, capsys):
    with pytest.raises(InputNotFoundError, match="no MLflow store at"):
        cmp.connect(f"sqlite:///{tmp_path / 'none' / 'mlflow.db'}")
    assert not (tmp_path / "none").exists()  # nothing created
    # a closed port: refused at once, one retry
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    with pytest.raises(InputError, match="cannot read MLflow at 'http://127.0.0.1:9'"):
        cmp.connect("http://127.0.0.1:9")


@pytest.mark.slow
def test_against_a_tracking_server(mlflow_server, tmp_path):  # noqa: F811
    """Runs logged to a real `mlflow server` (e.g. from several Slurm jobs) compare the same way."""
    from mlflow.tracking import MlflowClient

    from tests.mlflow_runs import log_known_runs

    ids = log_known_runs(mlflow_server, experiment="scaling-server")
    out = tmp_path / "out"
    assert main(["compare", "--tracking-uri", mlflow_server, "--experiment", "scaling-server",
                 "--output", str(out), "--target-miou", "0.55"]) == 0
    with (out / "comparison.csv").open() as f:
        table = {r["run_name"]: r for r in csv.DictReader(f)}
    assert [float(table[f"ddp-{n}"]["efficiency"]) for n in (1, 2, 4)] == pytest.approx([1.0, 0.95, 0.90])
    client = MlflowClient(tracking_uri=mlflow_server)
    experiment = client.get_experiment_by_name("eoscale-compare")
    runs = client.search_runs([experiment.experiment_id])
    run = next(r for r in runs if ids["ddp-1"] in r.data.tags["eoscale.compared_runs"])
    downloaded = Path(client.download_artifacts(run.info.run_id, "comparison.csv", str(tmp_path / "dl")))
    assert downloaded.read_text() == (out / "comparison.csv").read_text()
