"""scripts/setup.sh drops setuptools' editable-install note (issue 32, fault 4) and nothing else: its warnings
filter, applied to the note as setuptools emits it and to other warnings, in a fresh process (setup.sh itself
installs, so it is not run here)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.processes import ROOT

EMIT = """
import warnings
from setuptools.warnings import InformationOnly, SetuptoolsDeprecationWarning
InformationOnly.emit("Editable installation.", '''
    Please be careful with folders in your working directory with the same
    name as your package as they may take precedence during imports.
''')
SetuptoolsDeprecationWarning.emit("Something else.", "a real deprecation")
warnings.warn("Editable installation failed: a real error", UserWarning)
"""


def _filter() -> str:
    text = (ROOT / "scripts" / "setup.sh").read_text()
    (value,) = re.findall(r"^EDITABLE_NOTE='([^']+)'$", text, flags=re.M)
    assert '$EDITABLE_NOTE" \\\n    .venv/bin/python -m pip install -q -e' in text  # applied to the editable install
    return value


def _stderr(warnings_filter: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    if warnings_filter:
        env["PYTHONWARNINGS"] = warnings_filter
    return subprocess.run([sys.executable, "-c", EMIT], env=env, capture_output=True, text=True, check=True).stderr


def test_the_editable_install_note_alone_is_dropped():
    before, after = _stderr(None), _stderr(_filter())
    assert "Please be careful with folders" in before  # what the first quick start printed
    assert "Please be careful with folders" not in after
    assert "Something else." in after and "Editable installation failed" in after  # anything else still shows


PIP_NOTES = """WARNING: Location 'file:///opt/pypi-more/simple/tomlkit/' is ignored: it is neither a file nor a directory.
WARNING: Location 'file:///opt/pypi/simple/nvidia-pytriton/' is ignored: it is neither a file nor a directory.
ERROR: Could not find a version that satisfies the requirement torch==9.9
WARNING: Location 'file:///opt/x/' is ignored: a different reason
"""


def test_pip_location_notes_alone_are_dropped_and_pip_failures_still_fail():
    """setup.sh's quiet_pip (as it defines it) drops pip's note about an absent extra-index folder, keeps anything
    else on stderr, and a pip that fails still fails the script (the exit status is pip's, not the filter's)."""
    text = (ROOT / "scripts" / "setup.sh").read_text()
    (note,) = re.findall(r'^(PIP_LOCATION_NOTE=".*")$', text, flags=re.M)
    (func,) = re.findall(r"^(quiet_pip\(\) \{.*\})$", text, flags=re.M)
    script = f"""set -euo pipefail
{note}
{func}
( printf '%s' "$NOTES" >&2 ) 2> >(quiet_pip)
sleep 0.2
( printf 'x\\n' >&2; exit 3 ) 2> >(quiet_pip)
"""
    done = subprocess.run(["bash", "-c", script], env={**os.environ, "NOTES": PIP_NOTES}, capture_output=True, text=True)
    assert done.returncode == 3
    assert "is ignored: it is neither a file nor a directory" not in done.stderr
    assert "Could not find a version" in done.stderr and "a different reason" in done.stderr and "x" in done.stderr
