"""Transcript messages with their long repeated texts stored once per run.

Readers query ``messages`` (run_id, item_id, sample, agent, seq, role, content) as they always
did; since schema version 6 it is a view over two tables:

- ``message_rows``: one row per turn, keyed like ``messages``; ``content`` is NULL where
  ``text_id`` names a shared text, and holds the text itself otherwise.
- ``message_texts`` (run_id, text_id, content): each shared text of a run once, keyed by the
  SHA-256 of its UTF-8 bytes (hex), so writing it again (a resumed run, a batch written twice,
  a merge) adds nothing.

Shared are the system messages (:data:`SHARED_ROLE`): the rendered rubric of a single judge, or
each persona's, is the same for every sample of a run and was ~3/4 of the bytes each sample
wrote. A text goes in the same transaction as the rows that name it, so no row ever names a
missing text. Writers insert into ``message_rows`` and ``message_texts`` (a view takes no
inserts): :class:`~clinjudge.runs.RunStore` does it for the rows it is given as ``messages``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Sequence
from itertools import repeat
from typing import Any

import duckdb

MESSAGE_COLUMNS = ("run_id", "item_id", "sample", "agent", "seq", "role", "content")
"""The columns of ``messages``, in order."""

MESSAGE_ROWS_DDL = """
CREATE TABLE IF NOT EXISTS message_rows (
    run_id VARCHAR,
    item_id VARCHAR,
    sample INTEGER,
    agent VARCHAR,
    seq INTEGER,
    role VARCHAR,
    content VARCHAR,
    text_id VARCHAR,
    PRIMARY KEY (run_id, item_id, sample, agent, seq)
)
"""

MESSAGE_TEXTS_DDL = """
CREATE TABLE IF NOT EXISTS message_texts (
    run_id VARCHAR,
    text_id VARCHAR,
    content VARCHAR,
    PRIMARY KEY (run_id, text_id)
)
"""

SHARED_ROLE = "system"
"""Role of the texts stored once per run (see the module's note and bench/RESULTS.md)."""


def shared_sql(alias: str) -> str:
    """Whether a row's text is shared (a system message), in SQL over the ``role`` and
    ``content`` of the table ``alias``."""
    return f"{alias}.role = '{SHARED_ROLE}' AND {alias}.content IS NOT NULL"


_MEMO_ENTRIES = 256


def messages_select(*, row_order: bool = False) -> str:
    """The query behind the ``messages`` view (its columns, in order).

    Args:
        row_order: Add ``row_order`` (the row's ``rowid`` in ``message_rows``: the order rows
            were written in, which a view cannot expose as ``rowid``).
    """
    extra = ", m.rowid AS row_order" if row_order else ""
    return (
        "SELECT m.run_id, m.item_id, m.sample, m.agent, m.seq, m.role, "
        "CASE WHEN m.text_id IS NULL THEN m.content ELSE t.content END AS content"
        f"{extra} FROM message_rows m LEFT JOIN message_texts t "
        "ON t.run_id = m.run_id AND t.text_id = m.text_id"
    )


def text_id(text: str) -> str:
    """The key of a shared text: the SHA-256 (hex) of its UTF-8 bytes, as DuckDB's
    ``sha256()`` gives it, so a merge computes the same key in SQL."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class TextIds:
    """Keys of shared texts, each distinct text hashed once.

    SHA-256 costs ~2 µs per KB here, and a run's system messages come back for every sample:
    as the same object (a single judge's rubric is rendered once), or as equal ones (a
    panel's personas). A dict keyed by the text finds either: Python caches a string's own
    hash on the object and compares the same object by identity, and an equal copy costs one
    pass of the cheaper string hash and a compare. Emptied when full.
    """

    def __init__(self) -> None:
        self._keys: dict[str, str] = {}

    def __call__(self, text: str) -> str:
        """The key of ``text``."""
        key = self._keys.get(text)
        if key is None:
            key = text_id(text)
            if len(self._keys) >= _MEMO_ENTRIES:
                self._keys.clear()
            self._keys[text] = key
        return key


def split_messages(
    rows: Sequence[dict[str, Any]],
    ids: TextIds,
    *,
    stored: Collection[tuple[Any, str]] = (),
) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
    """Columns of ``message_rows`` and of ``message_texts`` for rows of ``messages``.

    Args:
        rows: Dicts with the columns of ``messages``.
        ids: The store's memo of text keys.
        stored: (run_id, text_id) of texts known to be stored already: left out of the texts.

    Returns:
        ``message_rows`` columns (shared texts replaced by their key) and the distinct shared
        texts they name that ``stored`` lacks, as ``message_texts`` columns.
    """
    run_ids: list[Any] = []
    contents: list[Any] = []
    text_ids: list[Any] = []
    texts: dict[tuple[Any, str], str] = {}
    for row in rows:
        run_id = row.get("run_id")
        content = row.get("content")
        run_ids.append(run_id)
        if content is not None and row.get("role") == SHARED_ROLE:
            key = ids(content)
            texts.setdefault((run_id, key), content)
            contents.append(None)
            text_ids.append(key)
        else:
            contents.append(content)
            text_ids.append(None)
    get = dict.get
    message_rows = {
        "run_id": run_ids,
        "item_id": list(map(get, rows, repeat("item_id"))),
        "sample": list(map(get, rows, repeat("sample"))),
        "agent": list(map(get, rows, repeat("agent"))),
        "seq": list(map(get, rows, repeat("seq"))),
        "role": list(map(get, rows, repeat("role"))),
        "content": contents,
        "text_id": text_ids,
    }
    new = [(key, text) for key, text in texts.items() if key not in stored]
    message_texts = {
        "run_id": [run_id for (run_id, _), _ in new],
        "text_id": [text_key for (_, text_key), _ in new],
        "content": [text for _, text in new],
    }
    return message_rows, message_texts


def migrate_messages(con: duckdb.DuckDBPyConnection) -> None:
    """Bring a store's messages to this layout, inside the caller's transaction.

    A store from before version 6 has a ``messages`` table: it becomes ``message_rows``
    (renamed, not copied: its rows keep their texts inline, ``text_id`` NULL, and read back
    unchanged through the view); later rows store their system messages once.

    Args:
        con: The store's connection, in a transaction.
    """
    kinds = dict(
        con.execute(
            "SELECT table_name, table_type FROM information_schema.tables "
            "WHERE table_catalog = current_database() AND table_schema = 'main' "
            "AND table_name IN ('messages', 'message_rows')"
        ).fetchall()
    )
    if kinds.get("messages") == "BASE TABLE" and "message_rows" not in kinds:
        con.execute("ALTER TABLE messages RENAME TO message_rows")
    con.execute(MESSAGE_ROWS_DDL)
    con.execute("ALTER TABLE message_rows ADD COLUMN IF NOT EXISTS text_id VARCHAR")
    con.execute(MESSAGE_TEXTS_DDL)
    con.execute(f"CREATE VIEW IF NOT EXISTS messages AS {messages_select()}")
