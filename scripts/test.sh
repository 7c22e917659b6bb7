#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the whole test suite, slow end-to-end tests included.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Two test processes (EOSCALE_TEST_WORKERS): most tests run one Python thread, so one process left a core idle
# (measured: tests/ingest + tests/maps 113 s in one process, 76 s in two); tests/conftest.py keeps each module's
# tests in one process (module fixtures are made once) and every local-Slurm module in one (one job at a time)
exec .venv/bin/python -m pytest -n "${EOSCALE_TEST_WORKERS:-2}" --dist loadfile "$@"
