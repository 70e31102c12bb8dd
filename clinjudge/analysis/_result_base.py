"""The base of the typed analysis results: frozen pydantic models that dump to the JSON of
``--json`` (``to_dict``), read by attribute; the old string-key reads still work for a while
with a ``DeprecationWarning``.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from clinjudge._util.pandas_import import PANDAS_NEEDED

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

PANDAS_MISSING = f"{PANDAS_NEEDED}; to_arrow() gives the same table without it"


class Result(BaseModel):
    """A typed result: attributes to read, ``to_dict()`` for the JSON of ``--json``.

    Keys that a result does not name as fields are kept (``model_extra``) so that a dump
    is the input's shape exactly (cached analyses written by other versions included).
    """

    model_config = ConfigDict(frozen=True, extra="allow", populate_by_name=True)

    def to_dict(self) -> dict[str, Any]:
        """The result as plain JSON-ready data, keys as ``--json`` prints them."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)

    def _old_key(self, key: str) -> Any:
        self._warn_old_key(key)
        return self.to_dict()[key]

    def _warn_old_key(self, key: str) -> None:
        warnings.warn(
            f"reading {type(self).__name__} by key ({key!r}) is deprecated: use its attributes "
            "(or .to_dict() for plain data)",
            DeprecationWarning,
            stacklevel=4,  # the reader's line, past __getitem__/get and _old_key
        )

    def __getitem__(self, key: str) -> Any:
        return self._old_key(key)

    def get(self, key: str, default: Any = None) -> Any:
        """Deprecated dict-style read (``to_dict().get``)."""
        try:
            return self._old_key(key)
        except KeyError:
            return default

    def __contains__(self, key: object) -> bool:
        return key in self.to_dict()


def arrow_table(rows: Sequence[Mapping[str, Any]], schema: pa.Schema) -> pa.Table:
    """Rows as an Arrow table of ``schema`` (an empty table when there are none)."""
    import pyarrow as pa

    return pa.Table.from_pylist(list(rows), schema=schema)


def to_pandas(table: pa.Table) -> pd.DataFrame:
    """``table.to_pandas()``, or an ImportError that says how to install pandas."""
    try:
        import pandas  # noqa: F401
    except ImportError as exc:
        raise ImportError(PANDAS_MISSING) from exc
    return table.to_pandas()
