#!/usr/bin/env bash
# Serve the documentation site locally at http://127.0.0.1:8000 (mkdocs.yml, docs/), rebuilt on every change.
# The notebooks are shown as stored (no outputs); the suite builds the site with them executed
# (tests/docs/test_site.py). 'bash scripts/docs.sh build' writes the static site into runs/site/ instead.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" NO_MKDOCS_2_WARNING=1
if [ "${1:-serve}" = build ]; then
    exec .venv/bin/python -m mkdocs build --strict -d runs/site
fi
exec .venv/bin/python -m mkdocs serve -a 127.0.0.1:8000
