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
