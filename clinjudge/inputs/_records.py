"""Read items from JSONL, CSV or Parquet through DuckDB and validate every record.

Errors name the file, the line (JSONL) or row (CSV, Parquet) and the field, and nothing is
returned unless every record is valid, so a bad file never leaves a half-written run.
"""

from __future__ import annotations

import codecs
import contextlib
import json
import re
import tempfile
from collections.abc import Generator, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
from pydantic import BaseModel, ValidationError
from pydantic_core import from_json

from clinjudge._util.offline import connect_duckdb
from clinjudge.errors import UserError, validation_problems
from clinjudge.rubrics import Item, Rubric

MAX_REPORTED_ERRORS = 20
_JSON_FIELDS = ("notes", "meta", "scores")
_TABLES = {".csv", ".tsv", ".parquet"}
_JSONL = {".jsonl", ".ndjson", ".json"}
CSV_BUFFER_BYTES = 4 << 20
"""DuckDB's CSV read buffer. Its reader keeps a number of buffers while it scans, so with its
default (16 x its 2 MB line limit) memory grew with the file up to a few hundred MB
(measured: 99 / 209 / 282 MB reading 10 / 126 / 252 MB files; 99 / 162 / 175 MB with 4 MB);
4 MB still takes any record the default took (a record may be up to about 4 MB)."""
_LONE_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")
READ_CHUNK = 512
"""Rows fetched from the reader at a time: what a streamed read holds at once."""


_LOCATION = re.compile(r"^(.*?):(?:line|row) (\d+):")


def in_file_order(problems: Sequence[str]) -> list[str]:
    """Problems sorted by file (first named first) and line or row, so the first lines shown
    are the first in the file whichever check found them; the rest keep their order.

    Args:
        problems: Messages starting ``FILE:line N:`` or ``FILE:row N:`` (others go last).
    """
    files: dict[str, int] = {}

    def key(problem: str) -> tuple[int, int]:
        match = _LOCATION.match(problem)
        if match is None:
            return (len(problems) + 1, 0)
        return (files.setdefault(match.group(1), len(files)), int(match.group(2)))

    return sorted(problems, key=key)


class InputError(UserError):
    """An input file is unreadable or holds invalid records (at most ``MAX_REPORTED_ERRORS``
    are shown, then how many more; ``problems`` holds them all)."""

    def __init__(self, problems: Sequence[str], *, setting: str | None = None):
        shown = list(problems[:MAX_REPORTED_ERRORS])
        if len(problems) > MAX_REPORTED_ERRORS:
            shown.append(f"... and {len(problems) - MAX_REPORTED_ERRORS} more problems")
        super().__init__("\n".join(shown), setting=setting)
        self.problems = list(problems)


def _quote(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


@contextmanager
def _literal(path: Path) -> Iterator[Path]:
    """A name for ``path`` that DuckDB cannot read as anything else.

    DuckDB treats a file name as a glob (``items[1].jsonl`` would read ``items1.jsonl``,
    ``x_*.jsonl`` every match) and may expand ``~`` or URL prefixes. It reads, instead, a link
    with a plain name in a private temporary folder, pointing at the file the user named.
    """
    with tempfile.TemporaryDirectory(prefix="clinjudge-input-") as folder:
        link = Path(folder) / f"input{path.suffix.lower()}"
        link.symlink_to(path.resolve())
        yield link


def parse_json(text: str) -> Any:
    """``json.loads``, cheaper on the long ASCII texts of clinical notes (#27: every input line
    is read twice, every stored item once per sample).

    pydantic-core's parser gives what ``json`` gives (big ints, ``NaN``, ``Infinity``, the last
    of duplicate keys; tested against ``json`` on generated documents) at a third to a quarter
    of the CPU on ASCII text without ``\\u`` escapes; on text with many escapes or non-ASCII
    characters it is slower than ``json`` (CJK notes: twice as slow), so such text goes to
    ``json``. What it refuses and ``json`` reads goes to ``json`` too, which also raises
    ``json``'s own errors.

    Args:
        text: A JSON document.
    """
    if text.isascii() and "\\u" not in text:
        try:
            return from_json(text, allow_inf_nan=True)
        except ValueError:
            pass
    return json.loads(text)


def _json_error(text: str) -> str:
    """Why a line is not JSON, as Python's parser says it (with the column)."""
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        return f"not valid JSON ({exc.msg} at column {exc.colno})"
    except (RecursionError, ValueError):
        pass
    return "not valid JSON"


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """A text file's lines with their numbers, read a line at a time: a line ends with LF,
    CR LF or a lone CR (as DuckDB's reader had it), a UTF-8 byte-order mark at the start is
    dropped."""
    number = 0
    with path.open("rb") as handle:
        for raw in handle:
            if not number and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8) :]
            body = raw[:-1] if raw.endswith(b"\n") else raw
            if b"\r" not in body:
                number += 1
                yield number, body
                continue
            parts = body.split(b"\r")
            if not parts[-1]:
                parts.pop()  # the CR of CR LF, or a file whose lines end with a lone CR
            for part in parts:
                number += 1
                yield number, part


def _jsonl_records(path: Path, problems: list[str] | None) -> Iterator[tuple[str, Any]]:
    # Read in Python a line at a time: DuckDB's line reader held the whole file (#27).
    found: list[str] = []
    for line, raw in _lines(path):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(
                [
                    f"{path}:line {line}: not valid UTF-8 (byte 0x{raw[exc.start]:02x} at "
                    f"column {exc.start + 1}); save the file as UTF-8"
                ]
            ) from None
        if not text.strip():
            continue
        where = f"{path}:line {line}"
        try:
            record = parse_json(text)
        except RecursionError:
            found.append(f"{where}: JSON nested too deeply for Python to read")
        except ValueError:
            found.append(f"{where}: {_json_error(text)}")
        else:
            if "\\u" in text and _LONE_SURROGATE.search(text) and _has_lone_surrogate(record):
                found.append(f"{where}: not valid JSON (a lone UTF-16 surrogate escape)")
            else:
                yield where, record
                continue
        if problems is not None:
            problems.extend(found)
            found = []
    if found:
        raise InputError(found)


def _has_lone_surrogate(record: Any) -> bool:
    """Whether a parsed record holds a string with half a surrogate pair (not UTF-8 text)."""
    try:
        json.dumps(record, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _table_records(
    con: duckdb.DuckDBPyConnection, path: Path, reader: str
) -> Iterator[tuple[str, Any]]:
    cursor = con.execute(f"SELECT * FROM {reader}")
    names = [d[0] for d in cursor.description]
    index = 0
    while rows := cursor.fetchmany(READ_CHUNK):
        for row in rows:
            index += 1
            yield f"{path}:row {index}", dict(zip(names, row, strict=True))


def _text_problem(path: Path, jsonl: bool) -> str | None:
    """Where a text file stops being readable (DuckDB's own message is a page of CSV settings):
    bytes that are not UTF-8, or in JSONL the control character the line reader splits on."""
    try:
        with path.open("rb") as handle:
            for line, raw in enumerate(handle, start=1):
                try:
                    raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    return (
                        f"{path}:line {line}: not valid UTF-8 (byte 0x{raw[exc.start]:02x} at "
                        f"column {exc.start + 1}); save the file as UTF-8"
                    )
                if jsonl and b"\x01" in raw:
                    return f"{path}:line {line}: not valid JSON (raw control character U+0001)"
    except OSError:
        return None
    return None


def read_records(path: str | Path, problems: list[str] | None = None) -> list[tuple[str, Any]]:
    """Raw records of a JSONL, CSV or Parquet file, each with a location for error messages.

    Args:
        path: The input file; the format follows the extension.
        problems: Where JSONL lines that are not JSON go, so that the caller goes on to check
            the other lines and reports every problem at once; None raises on them.

    Raises:
        InputError: The file cannot be read (or, without ``problems``, a line is not JSON).
    """
    with contextlib.closing(iter_records(path, problems)) as records:
        return list(records)


def iter_records(
    path: str | Path, problems: list[str] | None = None
) -> Generator[tuple[str, Any], None, None]:
    """The records of :func:`read_records`, streamed: the file is read ``READ_CHUNK`` rows at
    a time, so memory does not grow with its length.

    Args:
        path: The input file; the format follows the extension.
        problems: Where JSONL lines that are not JSON go (as they are met); None raises on
            them once the whole file was read.

    Raises:
        InputError: As :func:`read_records`; a file that cannot be read raises before the first
            record, or where the reader fails.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError([f"{path}: no such file"])
    suffix = path.suffix.lower()
    if suffix not in _JSONL and suffix not in _TABLES:
        raise InputError([f"{path}: unsupported format {suffix!r}; use .jsonl, .csv or .parquet"])
    return _stream_records(path, suffix, problems)


def _stream_records(
    path: Path, suffix: str, problems: list[str] | None
) -> Generator[tuple[str, Any], None, None]:
    if suffix in _JSONL:
        try:
            yield from _jsonl_records(path, problems)
        except OSError as exc:
            raise InputError([f"{path}: cannot read: {exc.strerror or exc}"]) from exc
        return
    con = connect_duckdb()
    try:
        with _literal(path) as source:
            if suffix in {".csv", ".tsv"}:
                reader = (
                    f"read_csv({_quote(source)}, header = true, all_varchar = true, "
                    f"buffer_size = {CSV_BUFFER_BYTES})"
                )
                yield from _table_records(con, path, reader)
            else:
                yield from _table_records(con, path, f"read_parquet({_quote(source)})")
    except duckdb.Error as exc:
        problem = None if suffix == ".parquet" else _text_problem(path, suffix not in _TABLES)
        problem = problem or f"{path}: cannot read: {str(exc).strip().splitlines()[0]}"
        raise InputError([problem]) from exc
    finally:
        con.close()


def _decode_json_fields(where: str, record: dict[str, Any], problems: list[str]) -> dict[str, Any]:
    decoded = dict(record)
    for field in _JSON_FIELDS:
        value = decoded.get(field)
        if isinstance(value, str):
            try:
                decoded[field] = json.loads(value)
            except json.JSONDecodeError as exc:
                problems.append(f"{where}: field {field}: not valid JSON ({exc.msg})")
            except RecursionError:
                problems.append(f"{where}: field {field}: JSON nested too deeply to read")
    for key, value in list(decoded.items()):
        if value is None or (isinstance(value, str) and not value.strip() and key != "summary"):
            decoded.pop(key)  # empty CSV cells and Parquet nulls mean "not given"
    return decoded


def _pydantic_problems(where: str, error: ValidationError) -> list[str]:
    return [f"{where}: {line}" for line in validation_problems(error, top="(record)")]


def validate_records(
    records: Iterable[tuple[str, Any]], model: type[BaseModel], problems: list[str]
) -> list[tuple[str, Any]]:
    """Validate raw records into ``model`` instances, appending problems instead of raising.

    Args:
        records: (location, raw record) pairs.
        model: The pydantic model each record must satisfy.
        problems: Collects error messages.
    """
    return list(iter_validated(records, model, problems))


def iter_validated(
    records: Iterable[tuple[str, Any]], model: type[BaseModel], problems: list[str]
) -> Iterator[tuple[str, Any]]:
    """:func:`validate_records` one record at a time (a streamed read stays streamed).

    Args:
        records: (location, raw record) pairs.
        model: The pydantic model each record must satisfy.
        problems: Collects error messages.
    """
    for where, raw in records:
        if not isinstance(raw, dict):
            problems.append(f"{where}: a record must be a JSON object")
            continue
        decoded = _decode_json_fields(where, raw, problems)
        try:
            yield where, model.model_validate(decoded)
        except ValidationError as exc:
            problems.extend(_pydantic_problems(where, exc))


def check_rubric_inputs(where: str, item: Item, rubric: Rubric, problems: list[str]) -> None:
    """Record a problem for every input the rubric needs that the item lacks."""
    if "notes" in rubric.inputs and not item.notes:
        problems.append(
            f"{where}: field notes: rubric {rubric.name} needs at least one source note"
        )
    for field in ("specialty", "reference"):
        if field in rubric.inputs and not getattr(item, field):
            problems.append(f"{where}: field {field}: rubric {rubric.name} needs a {field}")


def load_items(path: str | Path, rubric: Rubric) -> list[Item]:
    """Read and validate every item of an input file.

    Args:
        path: JSONL, CSV or Parquet file.
        rubric: The rubric the items will be judged with (decides which fields are required).

    Raises:
        InputError: Listing every problem found (file, line or row, field).
    """
    problems: list[str] = []
    with contextlib.closing(iter_items(path, rubric, problems)) as items:
        loaded = [item for _, item in items]
    if problems:
        raise InputError(in_file_order(problems))
    return loaded


def iter_items(
    path: str | Path, rubric: Rubric, problems: list[str]
) -> Generator[tuple[str, Item], None, None]:
    """Validated items of an input file, streamed in file order with their locations; nothing
    per item is kept but its id (to find duplicates).

    Problems (records that are not valid items, missing rubric inputs, duplicate ids, an empty
    file) go to ``problems`` as they are met; the items are only usable when it stays empty
    at the end, which the caller checks (raising :class:`InputError` with
    :func:`in_file_order`).

    Args:
        path: JSONL, CSV or Parquet file.
        rubric: The rubric the items will be judged with (decides which fields are required).
        problems: Collects error messages.

    Raises:
        InputError: The file cannot be read.
    """
    # Lines that are not JSON are reported with every other line's problems, not alone.
    records = iter_records(path, problems)
    return _checked_items(path, records, rubric, problems)


def _checked_items(
    path: str | Path,
    records: Generator[tuple[str, Any], None, None],
    rubric: Rubric,
    problems: list[str],
) -> Generator[tuple[str, Item], None, None]:
    seen: dict[str, str] = {}
    count = len(problems)
    with contextlib.closing(records):
        for where, item in iter_validated(records, Item, problems):
            check_rubric_inputs(where, item, rubric, problems)
            first = seen.setdefault(item.id, where)
            if first is not where:
                problems.append(f"{where}: field id: duplicate id {item.id!r} (first at {first})")
            yield where, item
    if not seen and len(problems) == count:
        problems.append(f"{path}: no records")
