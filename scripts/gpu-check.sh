#!/usr/bin/env bash
# One prepared check of eoscale on a GPU node, under 8 minutes on one H200: run it as is, then read the figures.
#
#   bash scripts/gpu-check.sh                          # on a GPU node: full size, figures into benchmarks/
#   bash scripts/gpu-check.sh --device cpu --size tiny --out /tmp/check --record /tmp/check/benchmarks   # this script's own test
#   bash scripts/gpu-check.sh --adapters               # also 6. below (about 10 more minutes on one GPU)
#   bash scripts/gpu-check.sh --adapters-only          # 6. alone: the decisive experiment, nothing else
#
# 1. a synthetic tile store (eoscale synth + ingest; 224-px tiles at full size)
# 2. eoscale bench gpu: bf16 ViT-B/16 training samples/s and MFU (FLOPs by torch.utils.flop_counter), the
#    loader's data-wait share at that speed, one FSDP2 step                 → <record>/gpu-<device>.json
# 3. eoscale bench predict --device <device>: whole-scene prediction against the bare forward → <record>/predict.json
# 4. eoscale fit --profile on the store: a profiled run; its trace and summary (with HTA's temporal breakdown
#    and comm/compute overlap on a GPU trace) in <out>/fit/profile/ and the run's MLflow artifacts
# 5. if `nsys` is on PATH: the same fit under Nsight Systems, captured over the steps of the NVTX capture range
#    (as `eoscale slurm submit … --set nsys=true` does per rank)                → <out>/nsys/fit-rank0.nsys-rep
# 6. with --adapters (or --adapters-only): the decisive experiment of issue 34 with the pretraining budget a CPU
#    lacks: MAE on 30 unlabelled synthetic scenes for 3,000 steps of 128 tiles, then scratch / full fine-tuning /
#    LoRA / linear probe at 100 %, 10 % and 1 % of the labels, 300 steps each, held-out mIoU on 3 scenes neither
#    stage saw (eoscale bench adapters; at --size tiny: one scene a store, LoRA at 100 % only, a few steps)
#                                                                        → <record>/adapters.json
#
# Every step prints its figures; the last lines name the files. README.md, "Profiling", says what each means.
set -euo pipefail
cd "$(dirname "$0")/.."

device=cuda size=full out=runs/gpu-check record=benchmarks adapters=0 only=0
while [[ $# -gt 0 ]]; do
    case $1 in
        --device) device=$2; shift 2 ;;
        --size) size=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --record) record=$2; shift 2 ;;
        --adapters) adapters=1; shift ;;
        --adapters-only) adapters=1 only=1; shift ;;
        -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
        *) echo "gpu-check.sh: error: unknown argument '$1' (give --device cuda|cpu, --size full|tiny, --out DIR, --record DIR, --adapters, --adapters-only)" >&2; exit 2 ;;
    esac
done
case $device in cuda|cpu) ;; *) echo "gpu-check.sh: error: --device '$device': give cuda or cpu" >&2; exit 2 ;; esac
case $size in
    full) scenes=4 px=1200 tile=224 predict=(--size 8192 --backbone vit_base_patch16_224 --tile 224 --batch-size 64)
          fit=(--config configs/vit_s16_seg.yaml --trainer.max_steps 12 --data.init_args.batch_size 32)
          # name:scenes:seed of the unlabelled, labelled and held-out sets, as benchmarks/README.md's CPU runs
          adapter_sets="unlab:30:100 lab:10:200 held:3:300" adapter_px=640 adapter_ingest=(--tile-size 64)
          adapter_args=(--mae-steps 3000 --mae-batch-size 128 --steps 300 --methods scratch full lora linear
                        --fractions 1 0.1 0.01 --recipe gpu-context-mae3000) ;;
    tiny) scenes=2 px=256 tile=32 predict=(--size 256 --tile 32 --batch-size 4 --repeats 1)
          fit=(--config configs/smoke.yaml --trainer.max_steps 6 --data.init_args.batch_size 4)
          adapter_sets="unlab:1:100 lab:1:200 held:1:300" adapter_px=128 adapter_ingest=(--tile-size 32 --split-block 1)
          adapter_args=(--mae-steps 2 --mae-batch-size 4 --steps 2 --batch-size 4 --decoder-channels 8
                        --methods lora --fractions 1 --recipe tiny) ;;
    *) echo "gpu-check.sh: error: --size '$size': give full or tiny" >&2; exit 2 ;;
esac
[[ -x .venv/bin/eoscale ]] && PATH="$PWD/.venv/bin:$PATH"
export MLFLOW_TRACKING_URI=${MLFLOW_TRACKING_URI:-sqlite:///$(realpath -m "$out")/mlflow.db}
accelerator=$([[ $device == cuda ]] && echo gpu || echo cpu)
mkdir -p "$out"
say() { echo "gpu-check: $*"; }

if [[ $only == 0 ]]; then
    say "1/5 tile store ($scenes scenes of ${px} px, ${tile}-px tiles) in $out/tiles.zarr"
    eoscale synth "$out/data" --scenes "$scenes" --size "$px" --overwrite >/dev/null
    eoscale ingest --scenes "$out"/data/scenes/*.tif --labels "$out"/data/labels/*_landcover.tif \
        --classes "$out/data/classes.csv" --output "$out/tiles.zarr" --tile-size "$tile" --split-block 1 --overwrite >/dev/null

    say "2/5 training throughput, MFU, data wait, FSDP2 step"
    eoscale bench gpu "$out/tiles.zarr" --device "$device" --size "$size" --record "$record"

    say "3/5 prediction throughput"
    eoscale bench predict --device "$device" "${predict[@]}" --record "$record"

    say "4/5 a profiled fit"
    fit_args=("${fit[@]}" --data.init_args.store "$out/tiles.zarr" --trainer.accelerator "$accelerator" --trainer.devices 1
              --trainer.default_root_dir "$out/fit" --trainer.val_check_interval 1000 --trainer.limit_val_batches 1
              --trainer.enable_progress_bar false --model.init_args.weights null)
    [[ $size == full ]] && fit_args+=(--trainer.precision bf16-mixed)
    [[ $size == tiny ]] && fit_args+=(--profile.wait 1 --profile.warmup 1 --profile.active 2)
    eoscale fit "${fit_args[@]}" --profile

    if command -v nsys >/dev/null 2>&1; then
        say "5/5 the same fit under Nsight Systems (steps 4-8)"
        mkdir -p "$out/nsys"
        NSYS_NVTX_PROFILER_REGISTER_ONLY=0 nsys profile --trace=cuda,nvtx,osrt --capture-range=nvtx \
            --nvtx-capture=eoscale-capture --capture-range-end=stop --force-overwrite=true \
            --output="$out/nsys/fit-rank0" eoscale fit "${fit_args[@]}" --steptime.capture_start 4 --steptime.capture_steps 4
    else
        say "5/5 skipped: no nsys on PATH (module load nsight-systems, or install NVIDIA's Nsight Systems)"
    fi
fi

if [[ $adapters == 1 ]]; then
    say "$([[ $only == 1 ]] && echo "adapters only" || echo "6/6"): the decisive experiment: MAE pretraining on unlabelled scenes, then scratch/full/LoRA/linear at 100/10/1 %"
    for set in $adapter_sets; do
        IFS=: read -r name n seed <<<"$set"
        eoscale synth "$out/$name" --scenes "$n" --size "$adapter_px" --seed "$seed" --overwrite >/dev/null
    done
    eoscale ingest --scenes "$out"/unlab/scenes/*.tif --output "$out/unlab.zarr" "${adapter_ingest[@]}" \
        --split 0.9,0.1,0 --overwrite --quiet
    for name in lab held; do
        split=$([[ $name == held ]] && echo 0,0,1 || echo 0.8,0.1,0.1)
        eoscale ingest --scenes "$out/$name"/scenes/*.tif --labels "$out/$name"/labels/*.tif \
            --classes "$out/$name/classes.csv" --output "$out/$name.zarr" "${adapter_ingest[@]}" --split "$split" \
            --overwrite --quiet
    done
    eoscale bench adapters "$out/lab.zarr" --pretrain-store "$out/unlab.zarr" --heldout "$out/held.zarr" \
        "${adapter_args[@]}" --threads 0 --mlflow "$out/bench-adapters" --record "$record"
fi

if [[ $only == 1 ]]; then
    say "done: figures in $record/adapters.json, learning curves in MLflow ($out/bench-adapters)"
else
    say "done: figures in $record/gpu-$device.json and $record/predict.json; profile in $out/fit/profile/*/summary.md"
fi
