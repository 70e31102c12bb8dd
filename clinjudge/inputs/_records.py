"""Read items from JSONL, CSV or Parquet through DuckDB and validate every record.

Errors name the file, the line (JSONL) or row (CSV, Parquet) and the field, and nothing is
returned unless every record is valid, so a bad file never leaves a half-written run.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
from pydantic import BaseModel, ValidationError

from clinjudge._util.offline import connect_duckdb
from clinjudge.errors import UserError, validation_problems
from clinjudge.rubrics import Item, Rubric

MAX_REPORTED_ERRORS = 20
_JSON_FIELDS = ("notes", "meta", "scores")
_TABLES = {".csv", ".tsv", ".parquet"}


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


def _json_error(text: str) -> str:
    """Why a line is not JSON, as Python's parser says it (with the column)."""
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        return f"not valid JSON ({exc.msg} at column {exc.colno})"
    except (RecursionError, ValueError):
        pass
    return "not valid JSON"


def _jsonl_records(
    con: duckdb.DuckDBPyConnection, source: Path, path: Path, problems: list[str] | None
) -> list[tuple[str, Any]]:
    rows = con.execute(
        f"""
        SELECT row_number() OVER () AS line, text, TRY_CAST(text AS JSON) IS NOT NULL AS ok
        FROM read_csv({_quote(source)}, columns = {{'text': 'VARCHAR'}}, delim = chr(1),
                      quote = '', escape = '', header = false, auto_detect = false,
                      parallel = false, max_line_size = 268435456)
        """
    ).fetchall()
    records: list[tuple[str, Any]] = []
    found: list[str] = []
    for line, text, ok in rows:
        if text is None or not text.strip():
            continue
        where = f"{path}:line {line}"
        if not ok:
            found.append(f"{where}: {_json_error(text)}")
            continue
        try:
            records.append((where, json.loads(text)))
        except RecursionError:
            found.append(f"{where}: JSON nested too deeply for Python to read")
    if found and problems is None:
        raise InputError(found)
    if problems is not None:
        problems.extend(found)
    return records


def _table_records(
    con: duckdb.DuckDBPyConnection, path: Path, reader: str
) -> list[tuple[str, Any]]:
    cursor = con.execute(f"SELECT * FROM {reader}")
    names = [d[0] for d in cursor.description]
    return [
        (f"{path}:row {index}", dict(zip(names, row, strict=True)))
        for index, row in enumerate(cursor.fetchall(), start=1)
    ]


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
    path = Path(path)
    if not path.is_file():
        raise InputError([f"{path}: no such file"])
    suffix = path.suffix.lower()
    con = connect_duckdb()
    try:
        with _literal(path) as source:
            if suffix in {".jsonl", ".ndjson", ".json"}:
                return _jsonl_records(con, source, path, problems)
            if suffix in {".csv", ".tsv"}:
                reader = f"read_csv({_quote(source)}, header = true, all_varchar = true)"
                return _table_records(con, path, reader)
            if suffix == ".parquet":
                return _table_records(con, path, f"read_parquet({_quote(source)})")
    except duckdb.Error as exc:
        problem = None if suffix == ".parquet" else _text_problem(path, suffix not in _TABLES)
        problem = problem or f"{path}: cannot read: {str(exc).strip().splitlines()[0]}"
        raise InputError([problem]) from exc
    finally:
        con.close()
    raise InputError([f"{path}: unsupported format {suffix!r}; use .jsonl, .csv or .parquet"])


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
    records: list[tuple[str, Any]], model: type[BaseModel], problems: list[str]
) -> list[tuple[str, Any]]:
    """Validate raw records into ``model`` instances, appending problems instead of raising.

    Args:
        records: (location, raw record) pairs.
        model: The pydantic model each record must satisfy.
        problems: Collects error messages.
    """
    valid = []
    for where, raw in records:
        if not isinstance(raw, dict):
            problems.append(f"{where}: a record must be a JSON object")
            continue
        decoded = _decode_json_fields(where, raw, problems)
        try:
            valid.append((where, model.model_validate(decoded)))
        except ValidationError as exc:
            problems.extend(_pydantic_problems(where, exc))
    return valid


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
    # Lines that are not JSON are reported with every other line's problems, not alone.
    records = read_records(path, problems)
    if not records and not problems:
        raise InputError([f"{path}: no records"])
    validated = validate_records(records, Item, problems)
    seen: dict[str, str] = {}
    for where, item in validated:
        check_rubric_inputs(where, item, rubric, problems)
        if item.id in seen:
            problems.append(
                f"{where}: field id: duplicate id {item.id!r} (first at {seen[item.id]})"
            )
        seen.setdefault(item.id, where)
    if problems:
        raise InputError(in_file_order(problems))
    return [item for _, item in validated]
