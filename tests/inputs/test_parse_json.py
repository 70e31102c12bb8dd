"""``parse_json`` reads every input line and every stored item's JSON with pydantic-core's
parser where that is cheaper (issue 27); it must give exactly what ``json.loads`` gives: the same
types (a big int stays an int, not a float), the same floats bit for bit, ``NaN`` and
``Infinity``, the last of duplicate keys in the first key's place, and ``json``'s own error for
what ``json`` refuses. Checked here on generated documents against ``json.loads`` itself, and
items read from a generated file against the same file read with ``json.loads`` alone.
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import struct
from pathlib import Path
from typing import Any

import pytest

import clinjudge.inputs._records as records_module
from clinjudge.inputs import iter_items, parse_json
from clinjudge.rubrics import load_rubric

_ALPHABET = (
    "abcdefghij KLMNOP 0123456789 .,;:!?-_/()[]{}<>'\"\\\t\n\r\x00\x1f\x7f"
    "°µ±éèçàüß–—“”…·•½é€ÆØ心電図血圧😀🩺\u2028\u2029\ufeff"
)


def _same(a: Any, b: Any) -> bool:
    """Equal values of exactly the same types; floats bit for bit (NaN, -0.0); dict key order."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b) or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _text(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.5:  # mostly ASCII prose, like English notes
        words = ["pain", "BP 138/84", "HbA1c 7.4%", "no", "acute", "distress", "[Note 1]"]
        return " ".join(rng.choices(words, k=rng.randint(0, 60)))
    return "".join(rng.choices(_ALPHABET, k=rng.randint(0, 80)))


def _number(rng: random.Random) -> Any:
    kind = rng.randrange(6)
    if kind == 0:
        return rng.randint(-(2**70), 2**70)  # beyond 64 bits as often as not
    if kind == 1:
        return rng.choice([0, -1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1])
    if kind == 2:
        return struct.unpack("<d", rng.randbytes(8))[0]  # any double, NaN and inf included
    if kind == 3:
        return rng.uniform(-1e6, 1e6)
    if kind == 4:
        return rng.choice([0.1, 0.30000000000000004, 5e-324, 2.2250738585072014e-308, -0.0])
    return rng.random() * 10 ** rng.randint(-320, 308)


def _value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(7 if depth < 4 else 5)
    if kind == 0:
        return _text(rng)
    if kind == 1:
        return _number(rng)
    if kind == 2:
        return rng.choice([True, False, None])
    if kind == 3:
        return _text(rng)
    if kind == 4:
        return _number(rng)
    if kind == 5:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 5))]
    return {_text(rng)[:12]: _value(rng, depth + 1) for _ in range(rng.randint(0, 5))}


def _documents(count: int) -> list[str]:
    rng = random.Random(27)
    docs = []
    for n in range(count):
        value = {
            "id": n,
            "notes": [_text(rng) for _ in range(rng.randint(0, 3))],
            "summary": _text(rng),
            "meta": _value(rng),
        }
        docs.append(json.dumps(value, ensure_ascii=bool(n % 2)))
    return docs


def test_generated_documents_read_as_json_reads_them() -> None:
    docs = _documents(3000)
    # The fast path is taken for a good share of them (ASCII without \u escapes).
    assert sum(d.isascii() and "\\u" not in d for d in docs) > 300
    for doc in docs:
        assert _same(parse_json(doc), json.loads(doc)), doc


@pytest.mark.parametrize(
    "doc",
    [
        "12345678901234567890123",
        "-9223372036854775809",
        "18446744073709551616",
        "[1e400, -1e400, 1E-400, -0, -0.0, 0e0, 1E+2, 2.5e-324]",
        "[NaN, Infinity, -Infinity]",
        '{"a": 1, "b": 2, "a": 3}',
        '{"a": {"x": 1}, "a": [2]}',
        ' \t\r\n{"a": "\\/\\b\\f\\n\\r\\t\\"\\\\"} \n',
        '"\\u0041\\u00e9\\ud83d\\ude00"',
        '"\\ud800"',
        '["\\udc00", "x"]',
        "[" * 300 + "]" * 300,  # deeper than pydantic-core reads
        "1.0000000000000000000001",
        "123456789012345678901234567890.5",
        "0.1e-5",
    ],
)
def test_edge_documents_read_as_json_reads_them(doc: str) -> None:
    assert _same(parse_json(doc), json.loads(doc))


@pytest.mark.parametrize(
    "doc",
    [
        "",
        "01",
        "+1",
        ".5",
        "1.",
        "[1,]",
        '{"a": 1,}',
        '"\\x41"',
        "'a'",
        "{a: 1}",
        "true false",
        '{"a"}',
        '"a\tb"',
        '{"a": 1}\x0c',
        "nan",
        "[]]",
    ],
)
def test_what_json_refuses_is_refused_with_jsons_error(doc: str) -> None:
    with pytest.raises(json.JSONDecodeError) as expected:
        json.loads(doc)
    with pytest.raises(json.JSONDecodeError) as got:
        parse_json(doc)
    assert (got.value.msg, got.value.pos) == (expected.value.msg, expected.value.pos)


def _jsonl(path: Path, count: int) -> Path:
    """Generated item records, one a line, with some bad ones among them."""
    rng = random.Random(5)
    lines = []
    for n in range(count):
        notes: list[Any] = [
            _text(rng) or "x"
            if k % 2
            else {"id": rng.choice([k + 1, f"n{k}"]), "text": _text(rng) or "x"}
            for k in range(rng.randint(0, 3))
        ]
        record: dict[str, Any] = {
            "id": rng.choice([n, f"item-{n}", f"  {n}  "]),
            "notes": notes,
            "summary": _text(rng),
        }
        for field in ("specialty", "reference", "vendor"):
            if rng.random() < 0.5:
                record[field] = rng.choice([_text(rng), "", "   ", None])
        if rng.random() < 0.5:
            record["meta"] = rng.choice([_value(rng), json.dumps(_value(rng))])
        if rng.random() < 0.1:
            record["notes"] = json.dumps(notes)  # a JSON string field, as a CSV cell gives it
        line = json.dumps(record, ensure_ascii=bool(n % 2))
        if n % 97 == 5:
            line = line[:-1] + ",}"  # not JSON
        if n % 89 == 7:
            line = line.replace('"summary"', '"sumary"', 1)  # a bad field
        lines.append(line)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_items_read_with_json_alone_are_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rubric = load_rubric("pdsqi9")
    data = _jsonl(tmp_path / "items.jsonl", 2000)
    lines = data.read_text(encoding="utf-8").splitlines()
    assert sum(line.isascii() and "\\u" not in line for line in lines) > 300  # the fast path

    def read() -> tuple[list[tuple[str, dict[str, Any], set[str]]], list[str]]:
        problems: list[str] = []
        with contextlib.closing(iter_items(data, rubric, problems)) as items:
            got = [(where, i.model_dump(), i.model_fields_set) for where, i in items]
        return got, problems

    fast = read()
    monkeypatch.setattr(records_module, "parse_json", json.loads)
    slow = read()
    assert len(fast[0]) > 1000 and len(fast[1]) > 40  # items and problems both
    assert fast[1] == slow[1]
    assert len(fast[0]) == len(slow[0])
    for (where, dump, fields), (where_slow, dump_slow, fields_slow) in zip(
        fast[0], slow[0], strict=True
    ):
        assert (where, fields) == (where_slow, fields_slow)
        assert _same(dump, dump_slow), where
