"""Every ```bash block of README.md, docs/getting-started.md and docs/how-to/*.md, as written, so a documented command
cannot rot (issue 46 item 8: the README's `eoscale ingest … --targets 'runs/chm/heights/*.tif'` failed as written).

Each block has a decision in BLOCKS, keyed by its page and first line; a new block without one fails here:
- RUN: the block runs in bash, as written, in a scratch folder holding the repository's configs/, pipelines/ and
  scripts/ (the blocks of one page in order, in one folder; the docs' own `eoscale synth` steps make their data).
  `eoscale` is tests/docs/capped_eoscale.py there: the same command with caps appended (scenes of at most 256 px,
  2 training steps). A RUN block may name some of its commands parse-only, with the reason.
- PARSE: the block needs what no test can have here (real products, a GPU, Slurm on JUWELS, a running server, the
  hours a study takes): each of its eoscale commands is parsed by the command's own parser (file options unexpanded),
  fit/pretrain's config files must exist, and so must every repository path the block names.
- SKIP: not an eoscale command (the test suite, the quick start script that tests/test_quickstart.py runs, a web UI);
  the repository paths it names must still exist.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from eoscale.bench.command import BENCHMARKS
from eoscale.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["README.md", "docs/getting-started.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs" / "how-to").glob("*.md"))]
LIGHTNING = ("fit", "pretrain", "validate", "test")
REPOSITORY = re.compile(r"(?:^|[=\s'])((?:configs|pipelines|scripts|slurm)/[\w./-]+)")  # paths the checkout holds
RUN = "run"


def PARSE(reason: str) -> tuple[str, str]:  # noqa: N802  (reads as the table's third kind beside RUN and SKIP)
    return "parse", reason


def SKIP(reason: str) -> tuple[str, str]:  # noqa: N802
    return "skip", reason


REAL = "real products and WorldCover tiles of the reader's (none can be downloaded here)"
QUICKSTART = "the quick start's checkpoint, scenes and map (runs/quickstart, made by tests/test_quickstart.py)"
JUWELS = "submits Slurm jobs on JUWELS/JURECA"
SAME_AS = "{page}'s RUN blocks run this command as written (suite time)"
SAME_AS_CHANGE = SAME_AS.format(page="docs/how-to/change.md")
SAME_AS_REGRESSION = SAME_AS.format(page="docs/how-to/regression.md")
FIELD = "a user's field and labelled places (tests/embed runs embed, fewshot, similar and change end to end)"
SEASONS = "three seasons of 16 products each, a minute here (tests/ingest/test_series.py ingests such sets)"

# (page, first line) -> RUN | PARSE(reason) | SKIP(reason); for RUN, also {command's start: why it is parse-only}
BLOCKS: dict[tuple[str, str], object] = {
    ("README.md", "bash scripts/quickstart.sh"): SKIP("tests/test_quickstart.py runs it (fewer training steps)"),
    ("README.md", "bash scripts/test.sh"): SKIP("the test suite itself"),
    ("README.md", "# change between two dates: pairs with known changes -> a store of two dates a place -> a change "
                  "model -> a change map"): (RUN, dict.fromkeys((
                      "eoscale synth runs/pairs --change",
                      "eoscale ingest --time-series --group-by grid --scenes 'runs/pairs/scenes/scene_00[0-3]*.tif'",
                      "eoscale fit --config configs/change_resnet18.yaml --data.init_args.store runs/pairs.zarr"),
                      SAME_AS_CHANGE) | dict.fromkeys((
                      "eoscale synth runs/chm --scenes 6 --size 256 --heights",
                      "eoscale ingest --scenes 'runs/chm/scenes/*.tif' --targets 'runs/chm/heights/*.tif'",
                      "eoscale fit --config configs/regression_smoke.yaml --data.init_args.store runs/chm/tiles.zarr"),
                      SAME_AS_REGRESSION)),
    ("docs/getting-started.md", "bash scripts/quickstart.sh"): SKIP("tests/test_quickstart.py runs it"),
    ("docs/getting-started.md", "bash scripts/test.sh"): SKIP("the test suite itself"),
    ("docs/getting-started.md", ".venv/bin/mlflow ui --backend-store-uri sqlite:///$PWD/runs/quickstart/mlflow.db    "
                                "# http://127.0.0.1:5000"): SKIP("a web UI that serves until stopped"),
    ("docs/how-to/accuracy.md", "eoscale sample maps/scene_004_landcover.tif --n 600 --allocation min-per-class 50 "
                                "--seed 1"): PARSE(QUICKSTART),
    ("docs/how-to/accuracy.md", "eoscale assess maps/scene_004_landcover.tif --reference "
                                "maps/scene_004_landcover_sample.csv"): PARSE("a sample labelled by hand"),
    ("docs/how-to/active-learning.md", "eoscale predict --checkpoint runs/quickstart/fit/checkpoints/last.ckpt \\"):
        PARSE(QUICKSTART),
    ("docs/how-to/active-learning.md", "eoscale sample runs/active/round0/scene_004_landcover.tif --by mixed \\"):
        PARSE(QUICKSTART),
    ("docs/how-to/active-learning.md", "eoscale label runs/active/round0/sample.csv --reference "
                                       "runs/quickstart/data/labels/scene_004_landcover.tif"): PARSE(QUICKSTART),
    ("docs/how-to/active-learning.md", "eoscale assess runs/active/round0/scene_004_landcover.tif --reference "
                                       "runs/active/round0/sample.csv"): PARSE(QUICKSTART),
    ("docs/how-to/active-learning.md", "eoscale label runs/active/round0/sample.csv --reference "
                                       "runs/quickstart/data/labels/scene_004_landcover.tif \\"): PARSE(QUICKSTART),
    ("docs/how-to/active-learning.md", "eoscale ingest --scenes runs/quickstart/data/scenes/scene_004.tif --labels "
                                       "runs/active/round0/labels.tif \\"):
        PARSE(QUICKSTART + "; pipelines/active-learning.yaml runs these steps in tests/test_quickstart.py"),
    ("docs/how-to/change.md", "eoscale change maps/2018_landcover.tif maps/2024_landcover.tif --output "
                              "change/2018-2024"): PARSE("two maps of the reader's place, a sample labelled by hand"),
    ("docs/how-to/change.md", "eoscale synth runs/pairs --change                   # each place a year later: "
                              "scenes/<id>_after.tif, labels/<id>_change.tif"): RUN,
    ("docs/how-to/imbalanced.md", "eoscale fit --config configs/forest.yaml --data.init_args.store runs/tiles.zarr"):
        PARSE("a store, scene and reference raster of the reader's"),
    ("docs/how-to/imbalanced.md", "eoscale bench learning runs/tiles.zarr --minutes 10 --label default"):
        PARSE("benchmarks of 10 CPU minutes a model"),
    ("docs/how-to/real-scenes.md", "gdalbuildvrt -separate scene.vrt landsat_b2.tif landsat_b3.tif landsat_b4.tif "
                                   "landsat_b5.tif"): SKIP("GDAL, not an eoscale command"),
    ("docs/how-to/real-scenes.md", "eoscale bench learning --scene scene.vrt --band-names B02,B03,B04,B08 --labels "
                                   "labels.tif --classes classes.csv \\"):
        PARSE("a real scene of the reader's; fits of minutes a model and seed"),
    ("docs/how-to/real-scenes.md", "eoscale bench learning --scene scene.vrt --config configs/vit_scene_seg.yaml "
                                   "--minutes 3 --pretrain 1.5 \\"):
        PARSE("a real scene of the reader's; pretraining and fits of minutes a seed"),
    ("docs/how-to/landsat.md", "eoscale ingest --scenes 'landsat/LC09_L2SP_*' --labels 'worldcover/*.tif' "
                               "--output runs/landsat.zarr"): PARSE(REAL),
    ("docs/how-to/landsat.md", "eoscale ingest --scenes 'S2*.SAFE' 'landsat/LC09_*' --band-map "
                               "SR_B2=B02,SR_B3=B03,SR_B4=B04,SR_B5=B8A \\"): PARSE(REAL),
    ("docs/how-to/pretraining.md", "eoscale synth runs/unlabelled-data --scenes 30 --size 640 --seed 100        "
                                   "# or your own scenes"): PARSE("the data of a pretraining study: 43 scenes"),
    ("docs/how-to/pretraining.md", "eoscale pretrain --config configs/mae_pretrain.yaml        # MAE, ViT-S/8, "
                                   "reads runs/unlabelled.zarr"): PARSE("pretraining of a study; FSDP on 4 devices"),
    ("docs/how-to/pretraining.md", "eoscale fit --config configs/lora_finetune.yaml      # frozen encoder + rank-4 "
                                   "adapters on qkv/proj + the head"): PARSE("the fine-tuning of a study"),
    ("docs/how-to/pretraining.md", "eoscale predict --checkpoint 'runs/lora/*/*/checkpoints/last.ckpt' --adapter "
                                   "quickstart --input scene.tif --output maps/"):
        PARSE("a Triton server (tests/serve) and the study's LoRA fit"),
    ("docs/how-to/pretraining.md", "eoscale bench adapters runs/tiles.zarr --pretrain-store runs/unlabelled.zarr "
                                   "--heldout runs/heldout.zarr \\"): PARSE("a benchmark of CPU hours"),
    ("docs/how-to/profiling.md", "eoscale fit --config configs/smoke.yaml --data.init_args.store "
                                 "runs/quickstart/tiles.zarr --profile"): PARSE(QUICKSTART),
    ("docs/how-to/profiling.md", "bash scripts/gpu-check.sh                 # on the GPU node, from the repository, "
                                 "after bash scripts/setup.sh"): SKIP("a GPU node"),
    ("docs/how-to/ray.md", "# JUWELS Booster: 4 nodes, one Ray node each with its 4 GPUs and 48 cores → 16 workers"):
        PARSE(JUWELS + ", or on a local Slurm cluster (root: scripts/local-slurm.sh; tests/slurm)"),
    ("docs/how-to/regression.md", "eoscale synth runs/chm --scenes 6 --size 256 --heights"): RUN,
    ("docs/how-to/regression.md", "eoscale ingest --scenes 'runs/chm/scenes/*.tif' --targets "
                                  "'runs/chm/heights/*.tif' \\"): RUN,
    ("docs/how-to/regression.md", "eoscale fit --config configs/regression_smoke.yaml --data.init_args.store "
                                  "runs/chm/tiles.zarr \\"): RUN,
    ("docs/how-to/regression.md", "eoscale predict --checkpoint runs/regression --input "
                                  "runs/chm/scenes/scene_005.tif \\"): RUN,
    ("docs/how-to/regression.md", "eoscale assess runs/chm/maps/scene_005_values.tif --reference plots.csv          "
                                  "# points: x, y, value"):
        (RUN, {"eoscale assess runs/chm/maps/scene_005_values.tif --reference plots.csv": "the reader's field plots"}),
    ("docs/how-to/scaling-study.md", "export MLFLOW_TRACKING_URI=sqlite:///$PROJECT/$USER/eoscale/mlflow.db"):
        PARSE(JUWELS),
    ("docs/how-to/scaling-study.md", "eoscale compare --experiment eoscale --output runs/compare"):
        PARSE("the study's MLflow runs"),
    ("docs/how-to/sentinel-1.md", "eoscale ingest --stac 's1/*/*.json' --labels 'worldcover/*.tif' --output "
                                  "runs/s1.zarr"): PARSE(REAL),
    ("docs/how-to/sentinel-1.md", "eoscale ingest --scenes 's2/*.tif' --labels 'worldcover/*.tif' --static "
                                  "dem/N51E006.tif --output runs/s2dem.zarr"): PARSE(REAL),
    ("docs/how-to/sentinel-1.md", "eoscale ingest --stac 's2/*/*.json' 's1/*/*.json' --labels 'worldcover/*.tif' "
                                  "--output runs/fused.zarr"): PARSE(REAL),
    ("docs/how-to/sentinel-1.md", "eoscale predict --checkpoint best.ckpt --stac 's2/*/*.json' 's1/*/*.json' "
                                  "--output runs/maps"): PARSE(REAL),
    ("docs/how-to/sentinel-1.md", "eoscale synth runs/fusion --layout cog --sensors s2,s1,dem"): RUN,
    ("docs/how-to/sentinel-2-safe.md", "eoscale ingest --scenes 'S2B_MSIL2A_*.SAFE' --labels "
                                       "'worldcover/ESA_WorldCover_10m_2021_v200_*_Map.tif' \\"): PARSE(REAL),
    ("docs/how-to/serving.md", "# after the quick start: its checkpoint as model 'landcover'"):
        PARSE("a Triton server in the background (tests/serve run it) on " + QUICKSTART),
    ("docs/how-to/serving.md", "eoscale serve --checkpoint 'runs/lora/*/*/checkpoints/last.ckpt' --adapter "
                               "quickstart &"): PARSE("a Triton server in the background (tests/serve run it)"),
    ("docs/how-to/serving.md", "eoscale slurm submit juwels-booster serve --account PROJECT --time 08:00:00 \\"):
        PARSE(JUWELS),
    ("docs/how-to/slurm.md", "eoscale slurm submit pipelines/quickstart.yaml"): PARSE("submits Slurm jobs (tests/slurm)"),
    ("docs/how-to/slurm.md", "# JUWELS Booster: 4 nodes × 4 A100, DDP (one srun task per GPU; rendezvous over "
                             "InfiniBand)"): PARSE(JUWELS),
    ("docs/how-to/slurm.md", "sudo bash scripts/local-slurm.sh start                 # prints: export "
                             "SLURM_CONF=/tmp/eoscale-slurm/slurm/slurm.conf"):
        PARSE("root and a local Slurm cluster (tests/slurm run it)"),
    ("docs/how-to/stac.md", "eoscale ingest --stac items/ --labels worldcover-items/ --output runs/stac.zarr"):
        PARSE(REAL),
    ("docs/how-to/time-series.md", "eoscale synth runs/season --dates 8 --scenes 2 --layout safe     # 2 places, 8 "
                                   "dates each (a few missing), SAFE"): PARSE(SEASONS),
    ("docs/how-to/time-series.md", "eoscale ingest --time-series --scenes 'runs/season/scenes/*' \\"):
        PARSE(SEASONS),
    ("docs/how-to/time-series.md", "eoscale synth runs/season-s1 --dates 8 --scenes 2 --sensors s2,s1,dem   # + "
                                   "each place's S1 passes and its DEM"): RUN,
    ("docs/how-to/time-series.md", "eoscale pretrain --config configs/temporal_mae_pretrain.yaml "
                                   "--data.init_args.store runs/season.zarr"):
        PARSE("the seasons above; a temporal ViT pretrained and fine-tuned (tests/train run both)"),
    ("docs/how-to/time-series.md", "eoscale pipeline run pipelines/season-fused.yaml    # a few CPU minutes; "
                                   "everything in runs/season-fused/"): PARSE("tests/test_season_fused_pipeline.py runs it"),
    ("docs/how-to/time-series.md", "eoscale pipeline run pipelines/season.yaml          # a few CPU minutes; "
                                   "everything in runs/season/"): PARSE("tests/test_season_pipeline.py runs it"),
    ("docs/how-to/time-series.md", "eoscale bench temporal --steps 1500                   # the recorded run, about "
                                   "15 minutes on 2 cores"): PARSE("a benchmark of 15 CPU minutes"),
    ("docs/how-to/time-series.md", "eoscale bench fusion --dates 6 --tile-size 32 --steps 150 --workers 0   # the "
                                   "recorded run, about 11 minutes on 2 cores"): PARSE("a benchmark of 11 CPU minutes"),
    ("docs/how-to/uncertainty.md", "eoscale calibrate runs/best.ckpt --store runs/tiles.zarr                 # "
                                   "writes runs/best.calibrated.ckpt"): PARSE("a checkpoint and store of the reader's"),
    ("docs/how-to/uncertainty.md", "eoscale predict --checkpoint runs/best.ckpt --input 'scenes/*.tif' --output "
                                   "maps/ \\"): PARSE("a checkpoint and scenes of the reader's"),
    ("docs/how-to/uncertainty.md", "eoscale predict ... --smooth bayes:7:10 --mmu 20"): PARSE("an excerpt"),
    ("docs/how-to/uncertainty.md", "eoscale bench calibration          # synth + ingest + fit + calibrate + predict, "
                                   "about 5 CPU minutes"): PARSE("a benchmark of 5 CPU minutes"),
    ("docs/how-to/acquisition.md", "jutil env activate -p PROJECT"):
        PARSE("a public STAC API on the internet (tests/acquire searches a local rustac server)"),
    ("docs/how-to/acquisition.md", "eoscale stage --items $PROJECT/$USER/lists/s2-2024.parquet --cache "
                                   "$SCRATCH/$USER/cache-2024 --jobs 8"):
        PARSE("a catalog's assets on the internet (tests/acquire stages from a local asset server with faults)"),
    ("docs/how-to/acquisition.md", "# double quotes: $SCRATCH is expanded here, on the login node; a backslash-newline "
                                   "inside them is only a line break"): PARSE(JUWELS),
    ("docs/how-to/embeddings.md", "eoscale embed --checkpoint runs/quickstart/fit --input "
                                  "'runs/quickstart/data/scenes/*.tif' --output fields/"):
        PARSE(QUICKSTART + "; tests/embed embeds a fitted checkpoint's scenes end to end"),
    ("docs/how-to/embeddings.md", "eoscale fewshot fields/scene_embedding.tif --points labels.csv --column class "
                                  "--output fewshot/"): PARSE(FIELD),
    ("docs/how-to/embeddings.md", "eoscale ingest --scenes zion.vrt --band-names B02,B03,B04,B08 --output "
                                  "runs/zion-unlabelled.zarr"):
        PARSE("a real scene of the reader's (tests/bench/test_bench_fewshot.py runs the bench on a small one)"),
    ("docs/how-to/embeddings.md", "eoscale similar fields/scene_embedding.tif --points quarries.gpkg --output "
                                  "quarries_similarity.tif"): PARSE(FIELD),
    ("docs/how-to/embeddings.md", "eoscale change fields/2018_embedding.tif fields/2024_embedding.tif --output "
                                  "change/2018-2024"): PARSE(FIELD),
}


def blocks() -> list[tuple[str, str, str]]:
    """(page, first line, text) of every ```bash block of PAGES, in page order."""
    found = []
    for page in PAGES:
        for text in re.findall(r"^```bash\n(.*?)^```", (ROOT / page).read_text(), flags=re.S | re.M):
            found.append((page, text.splitlines()[0].strip(), text))
    return found


def commands(text: str) -> list[str]:
    """The block's shell lines, continuations joined."""
    return [line.strip() for line in re.sub(r"\\\n\s*", " ", text).splitlines() if line.strip()]


def eoscale_argv(line: str) -> list[str] | None:
    """The arguments of an `eoscale …` line (up to `&`, a pipe or a redirection; `...` elisions dropped), else None."""
    tokens = shlex.split(line, comments=True)
    if not tokens or tokens[0] != "eoscale":
        return None
    argv = []
    for token in tokens[1:]:
        if token in ("&", "|", ">", ">>", "&&", ";"):
            break
        if token != "...":
            argv.append(token)
    return argv


def decision(page: str, first: str) -> tuple[str, str | dict]:
    """The block's decision; a block without one is left to test_every_block_has_a_decision, which fails on it."""
    made = BLOCKS.get((page, first), SKIP("no decision yet"))
    return (RUN, {}) if made == RUN else made


def test_every_block_has_a_decision():
    found = [(page, first) for page, first, _ in blocks()]
    assert len(found) == len(set(found)), "two blocks of a page start with the same line: make them distinct"
    missing = [key for key in found if key not in BLOCKS]
    assert not missing, f"documented blocks without a decision (RUN, PARSE or SKIP in BLOCKS here): {missing}"
    stale = [key for key in BLOCKS if key not in found]
    assert not stale, f"BLOCKS names blocks the docs no longer have: {stale}"


def test_a_command_left_to_another_block_runs_there():
    """A RUN block's command left parse-only as SAME_AS (another page's) is, exactly as written, one that the other
    page's RUN blocks run."""
    pages = {SAME_AS.format(page=page): page for page in PAGES}
    left = 0
    for page, first, text in blocks():
        kind, parse_only = decision(page, first)
        for start, why in (parse_only.items() if kind == RUN else ()):
            if why not in pages:
                continue
            ran = [shlex.split(line, comments=True) for p, f, t in blocks() if p == pages[why]
                   and decision(p, f)[0] == RUN for line in commands(t)
                   if not any(line.startswith(s) for s in decision(p, f)[1])]
            written = [shlex.split(line, comments=True) for line in commands(text) if line.startswith(start)]
            assert written and all(line in ran for line in written), (page, start, pages[why])
            left += 1
    assert left == 6  # README's change and regression workflows


def test_the_repository_paths_of_every_block_exist():
    missing = []
    for page, _, text in blocks():
        for line in commands(text):
            for token in shlex.split(line, comments=True):
                for path in REPOSITORY.findall(f" {token}"):
                    if not (ROOT / path).exists():
                        missing.append(f"{page}: {path}")
    assert not missing, missing


def parse_command(argv: list[str], *, elided: bool) -> None:
    """Parse `eoscale ARGV` with its command's parser, file options unexpanded; an error fails the test."""
    name = argv[0]
    assert name in COMMANDS, f"eoscale {name}: no such command"
    if name in LIGHTNING:
        configs = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--config"]
        assert all((ROOT / c).is_file() for c in configs), f"eoscale {' '.join(argv)}: a --config that does not exist"
        return
    if name == "bench":
        module, rest = BENCHMARKS[argv[1]][0], argv[2:]
        parser = argparse.ArgumentParser(prog=f"eoscale bench {argv[1]}")
        parser.add_argument("--record")
    else:
        module, rest = COMMANDS[name][0], argv[1:]
        parser = argparse.ArgumentParser(prog=f"eoscale {name}")
    importlib.import_module(module).configure(parser)
    if elided:  # `eoscale ingest ... --static dem/*.tif`: the options left out may be the required ones
        for action in parser._actions:
            action.required = False
        for group in parser._mutually_exclusive_groups:
            group.required = False
    try:
        parser.parse_args(rest)
    except SystemExit:
        pytest.fail(f"eoscale {' '.join(argv)}: its parser refuses it (see above)")


def test_every_documented_command_parses(unexpanded):
    """Every eoscale command of every block (RUN ones too: a cheap first check) is one its parser takes."""
    seen = 0
    for _page, _, text in blocks():
        for line in commands(text):
            argv = eoscale_argv(line)
            if argv:
                parse_command(argv, elided="..." in shlex.split(line, comments=True))
                seen += 1
    assert seen > 60


def test_the_cap_keeps_a_command_and_adds_limits():
    sys.path.insert(0, str(ROOT / "tests" / "docs"))
    try:
        from capped_eoscale import capped
    finally:
        sys.path.pop(0)
    assert capped(["synth", "runs/x", "--size", "640"]) == ["synth", "runs/x", "--size", "256"]
    assert capped(["synth", "runs/x", "--size", "100x900"]) == ["synth", "runs/x", "--size", "100x256"]
    assert capped(["synth", "runs/x"])[-2:] == ["--size", "256"]
    fit = capped(["fit", "--config", "configs/smoke.yaml", "--trainer.max_steps", "600"])
    assert fit[:5] == ["fit", "--config", "configs/smoke.yaml", "--trainer.max_steps", "600"]
    assert fit[5:7] == ["--trainer.max_steps", "2"]  # appended: the later value wins in LightningCLI
    assert capped(["ingest", "--scenes", "a.tif"]) == ["ingest", "--scenes", "a.tif"]


def _run_pages() -> list[str]:
    return [page for page in PAGES if any(decision(p, f)[0] == RUN for p, f, _ in blocks() if p == page)]


@pytest.mark.slow
@pytest.mark.parametrize("page", _run_pages())
def test_the_runnable_blocks_run_as_written(page, tmp_path):
    """The page's RUN blocks, in order, in bash in one scratch folder; `eoscale` is the capped command."""
    for name in ("configs", "pipelines", "scripts"):
        (tmp_path / name).symlink_to(ROOT / name)
    shim = ROOT / "tests" / "docs" / "capped_eoscale.py"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "SLURM_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    for block_page, first, text in blocks():
        kind, parse_only = decision(block_page, first)
        if block_page != page or kind != RUN:
            continue
        lines = []
        for line in commands(text):
            why = next((reason for start, reason in parse_only.items() if line.startswith(start)), None)
            lines.append(f": {shlex.quote('parse-only: ' + why)}" if why else line)
        script = "\n".join([f'eoscale() {{ {shlex.quote(sys.executable)} {shlex.quote(str(shim))} "$@"; }}',
                            "set -euo pipefail -x", *lines])
        done = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, f"{page}, the block '{first}' fails as written:\n{done.stderr[-6000:]}"
