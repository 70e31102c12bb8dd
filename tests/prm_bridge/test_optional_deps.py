"""Without the `prm` extra, clinjudge still imports and the PRM says how to install it."""

from __future__ import annotations

import subprocess
import sys

from tests.requirements import WITHOUT_PRM_EXTRA

SCRIPT = (
    WITHOUT_PRM_EXTRA
    + """
import clinjudge, clinjudge.prm_bridge as prm
from clinjudge.cli import app
assert "torch" not in sys.modules
try:
    prm.TransformersPRM("somewhere", prm.make_format("medprm"))
except prm.PRMDependencyError as exc:
    print("HINT", exc)
"""
)


def test_import_without_torch_and_clear_install_hint():
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    assert "HINT the PRM bridge needs torch and transformers: pip install 'clinjudge[prm]'" in (
        out.stdout
    )
