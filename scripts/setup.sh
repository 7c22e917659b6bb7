#!/usr/bin/env bash
# Install eoscale and its test tools into .venv (Python 3.11, pip; torch 2.14.1 + torchvision 0.29.1 come from
# this machine's local wheel store), every package at the version of scripts/constraints.txt. Reruns are cheap: the venv
# is reused while pyproject.toml and the constraints are unchanged.
set -euo pipefail
cd "$(dirname "$(realpath "$0")")/.."   # the repository holding this script (not a copy linking to it)
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
# GDAL's command-line tools (gdalinfo) check the COG maps in the tests; Debian's gdal-bin
if ! command -v gdalinfo >/dev/null 2>&1 && [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing gdal-bin (gdalinfo)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gdal-bin >/dev/null
fi
# a real browser for the documentation site's check (tests/docs: the CLI reference rendered headless); Debian's chromium
if ! command -v chromium >/dev/null 2>&1 && [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing chromium (the docs site's browser check)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1 \
        || echo "setup: chromium could not be installed; tests/docs skips its browser check"
fi
stamp=.venv/.eoscale-requirements
want=$(cat pyproject.toml scripts/constraints.txt | sha256sum | cut -d' ' -f1)
if [[ -x .venv/bin/python && -f $stamp && "$(cat $stamp)" == "$want" ]]; then
    echo "setup: .venv is up to date"
    exit 0
fi
# pip's note for each package absent from an extra index this machine's pip.conf names ("WARNING: Location
# 'file:///opt/pypi-more/simple/x/' is ignored: it is neither a file nor a directory": hundreds of lines a fresh
# install, nothing wrong) is dropped from pip's stderr; every other line still shows (tests/test_setup_noise.py)
PIP_LOCATION_NOTE="^WARNING: Location '[^']*' is ignored: it is neither a file nor a directory\.$"
quiet_pip() { grep -v -E "$PIP_LOCATION_NOTE" >&2 || true; }
echo "setup: installing eoscale into .venv (first time: a few minutes)"
[[ -x .venv/bin/python ]] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip setuptools wheel 2> >(quiet_pip)
# setuptools' note on every editable install ("Please be careful with folders in your working directory ...", an
# InformationOnly warning: nothing is wrong) is dropped by a warnings filter on its exact summary; every other
# warning and error still shows (tests/test_setup_noise.py)
EDITABLE_NOTE='ignore:Editable installation.:UserWarning'
# DeepSpeed (configs/strategy/zero*.yaml) builds none of its ops at install: they would need CUDA and minutes
# every extra (deepspeed, ray, serve): the tests use them all
DS_BUILD_OPS=0 PYTHONWARNINGS="${PYTHONWARNINGS:+$PYTHONWARNINGS,}$EDITABLE_NOTE" \
    .venv/bin/python -m pip install -q -e '.[dev,all]' -c scripts/constraints.txt 2> >(quiet_pip)
# eoscale serve: PyTriton (bundles tritonserver) without its numpy<2 pin, see eoscale/_compat/pytriton.py
.venv/bin/python -m pip install -q --no-deps 'nvidia-pytriton==0.7.0' 2> >(quiet_pip)
# Holistic Trace Analysis (--profile summaries): without its declared jupyterlab, which only its notebooks need
.venv/bin/python -m pip install -q --no-deps 'HolisticTraceAnalysis==0.5.0' 2> >(quiet_pip)
echo "$want" > $stamp
echo "setup: done ($(.venv/bin/python -c 'import torch; print("torch", torch.__version__)'))"
