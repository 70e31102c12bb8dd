"""The analysis commands load numpy with one OpenBLAS thread (its pool of spinning threads
cost every start about 0.1 s of CPU, #39), unless the user chose a number; nothing started
after them inherits the setting."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

_PROBE = """
import json, os, sys
from clinjudge.cli import main
sys.argv = ["judge", *sys.argv[1:]]
try:
    main()
except SystemExit as exc:
    assert not exc.code, exc.code
from threadpoolctl import threadpool_info
blas = [i["num_threads"] for i in threadpool_info() if i["internal_api"] == "openblas"]
print(json.dumps({"blas": blas, "env": os.environ.get("OPENBLAS_NUM_THREADS")}), file=sys.stderr)
"""


def _ratings(tmp_path: Path) -> Path:
    rows = [
        {"item_id": f"u{unit}", "rater_id": rater, "attribute": "overall",
         "score": 1 + (unit * 3 + offset) % 5}
        for unit in range(8)
        for rater, offset in (("dr_a", 0), ("dr_b", 1), ("dr_c", 0))
    ]  # fmt: skip
    path = tmp_path / "ratings.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _agree(tmp_path: Path, **env: str) -> dict:
    environment = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    environment.update(env)
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, "agree", "--ratings", str(_ratings(tmp_path)), "--json"],
        capture_output=True, text=True, env=environment, timeout=300, check=True,
    )  # fmt: skip
    return json.loads(done.stderr.strip().splitlines()[-1])


def test_agree_runs_numpy_on_one_blas_thread_and_leaves_no_setting(tmp_path: Path) -> None:
    seen = _agree(tmp_path)  # numpy's and scipy's own OpenBLAS: each on one thread
    assert seen["blas"] and set(seen["blas"]) == {1} and seen["env"] is None


def test_a_users_choice_of_blas_threads_is_kept(tmp_path: Path) -> None:
    seen = _agree(tmp_path, OPENBLAS_NUM_THREADS="2")
    assert seen["blas"] and set(seen["blas"]) == {2} and seen["env"] == "2"
