"""Keep third-party libraries off the network.

Clinical text is PHI: the only network peer clinjudge may talk to is the model endpoint the
user configured. litellm fetches a price map and tiktoken fetches encodings unless told
otherwise, so both are pointed at files that ship inside the litellm wheel before either is
imported; DuckDB connections never install or load extensions on their own.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb


def _litellm_tokenizer_dir() -> Path | None:
    spec = importlib.util.find_spec("litellm")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "litellm_core_utils" / "tokenizers"
    return path if path.is_dir() else None


def configure_offline_environment() -> None:
    """Set the environment so litellm and tiktoken never download anything."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_TELEMETRY", "False")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    tokenizer_dir = _litellm_tokenizer_dir()
    if tokenizer_dir is not None:
        # litellm overwrites TIKTOKEN_CACHE_DIR with CUSTOM_TIKTOKEN_CACHE_DIR when it loads.
        os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(tokenizer_dir))
        os.environ.setdefault("CUSTOM_TIKTOKEN_CACHE_DIR", os.environ["TIKTOKEN_CACHE_DIR"])


_NO_EXTENSION_DOWNLOADS = {
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
}
"""DuckDB would otherwise fetch an extension from the internet for a file it does not know
(an SQLite file given as --db): clinical data never leads to a network call."""


def connect_duckdb(
    database: str = ":memory:", *, read_only: bool = False
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection that never installs or loads extensions on its own.

    Args:
        database: File name, or ``:memory:``.
        read_only: Open without write access.
    """
    import duckdb  # here, not at the top: `import clinjudge` stays light for `judge --version`

    return duckdb.connect(database, read_only=read_only, config=dict(_NO_EXTENSION_DOWNLOADS))
