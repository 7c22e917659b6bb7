#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the whole test suite, slow end-to-end tests included.
#   bash scripts/test.sh                  everything (what .ci/run runs)
#   bash scripts/test.sh --fast           the fast tier for iterating: no test marked slow or slurm, and none of the
#                                         folders that train networks, run notebooks or serve (a few minutes)
#   bash scripts/test.sh tests/ingest -x  arguments go to pytest
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
fast=()
if [[ "${1:-}" == --fast ]]; then
    shift
    fast=(-m "not slow and not slurm" --ignore=tests/train --ignore=tests/bench --ignore=tests/notebooks
          --ignore=tests/serve --ignore=tests/docs --ignore=tests/slurm --ignore=tests/test_quickstart.py)
fi
# Two test processes (EOSCALE_TEST_WORKERS): most tests run one Python thread, so one process left a core idle
# (measured: tests/ingest + tests/maps 113 s in one process, 76 s in two); tests/conftest.py keeps each module's
# tests in one process (module fixtures are made once) and every local-Slurm module in one (one job at a time)
exec .venv/bin/python -m pytest -n "${EOSCALE_TEST_WORKERS:-2}" --dist loadfile "${fast[@]}" "$@"
