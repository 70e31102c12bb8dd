"""Without pandas installed, ``.to_pandas()`` of a Run's Arrow tables says how to install it,
as the result objects do (#39), and the tables stay plain ``pyarrow.Table`` objects."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa

import clinjudge
from clinjudge._util.pandas_import import PANDAS_NEEDED, explain_missing_pandas, without_pandas

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

# Hides pandas from every finder (as if it were not installed), then asks a stored run's table
# for pandas. Prints the table's type and the error's type and text.
_NO_PANDAS = """
import sys


class Hidden:
    def __init__(self, finder):
        self.finder = finder

    def find_spec(self, name, path=None, target=None):
        if name == "pandas" or name.startswith("pandas."):
            return None
        find = getattr(self.finder, "find_spec", None)
        return find(name, path, target) if find else None

    def __getattr__(self, name):  # find_distributions, invalidate_caches...
        return getattr(self.finder, name)


sys.meta_path[:] = [Hidden(finder) for finder in sys.meta_path]
import clinjudge

table = clinjudge.load_run(sys.argv[1], db=sys.argv[2]).judgments(final=True)
print(type(table).__module__, type(table).__name__, table.num_rows > 0)
try:
    table.to_pandas()
except ImportError as exc:
    print(type(exc).__name__, getattr(exc, "name", None))
    print(exc)
"""


def test_to_pandas_of_a_run_table_without_pandas_says_how_to_install_it(db_path: Path) -> None:
    data = str(EXAMPLES / "pdsqi9_demo.jsonl")
    result = clinjudge.evaluate(data, model="mock/judge", limit=2, db=db_path, progress=False)
    done = subprocess.run(
        [sys.executable, "-c", _NO_PANDAS, result.run_id, str(db_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    kind, error, message = done.stdout.splitlines()[:3]
    assert kind == "pyarrow.lib Table True"
    # Still the error a `try: import pandas` expects, with the way out in its text.
    assert error == "ModuleNotFoundError pandas"
    assert message == (
        f"No module named 'pandas'. {PANDAS_NEEDED}; the Arrow table works without it"
    )


def test_an_installed_pandas_is_found_as_usual() -> None:
    explain_missing_pandas()
    explain_missing_pandas()  # once is enough: the finder is not added twice
    finders = [type(f).__name__ for f in sys.meta_path].count("_PandasMissing")
    assert finders == 1
    frame = pa.table({"score": [1, 2]}).to_pandas()
    assert list(frame["score"]) == [1, 2]


_BLOCKED = """
import sys
from clinjudge._util.pandas_import import without_pandas
import pyarrow as pa
import pyarrow.compute as pc

with without_pandas():
    table = pa.table({"rater_id": ["a", "judge"], "score": [1.0, 2.0]})
    assert pc.any(pc.equal(table.column("rater_id"), "judge")).as_py()
    print("pandas" in sys.modules)
print(type(table.to_pandas()).__name__)
"""


def test_without_pandas_arrow_converts_lists_and_to_pandas_still_works_after() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _BLOCKED], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "DataFrame"]


def test_without_pandas_leaves_an_imported_pandas_alone() -> None:
    import pandas  # noqa: F401  (imported already: the block must not hide it)

    with without_pandas():
        assert pa.table({"a": [1]}).to_pandas().shape == (1, 1)
