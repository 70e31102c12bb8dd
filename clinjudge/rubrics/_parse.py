"""Read a judge's reply: forgiving extraction, then strict validation against the rubric.

Models wrap JSON in code fences, think aloud in ``<think>`` blocks, rename keys, quote numbers
and nest scores in ``{"score", "explanation"}`` objects. All of that is accepted: endpoints
without structured output still send it. What is not accepted is what the rubric's JSON Schema
(``rubric_json_schema``, the contract the request carries) rules out, read from that schema: a
missing key, a value outside the enum, null where the schema allows none; and a broken gate,
which the schema cannot state. A missing or long ``rationale`` is tolerated (it holds no score,
and re-asking for it would cost a call). Those raise
:class:`JudgmentParseError` with a reason, never a silent default. One gate break is read, not
rejected, unless the rubric says ``gate: strict``: a score for an attribute whose gate says null
(``synthesized`` with ``abstraction`` 0) becomes null, and the score given is kept in
``ParsedJudgment.coerced``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import orjson

from clinjudge.errors import ClinJudgeError
from clinjudge.rubrics._json_schema import RATIONALE_KEY, allowed_values, scale_schema
from clinjudge.rubrics._schema import Attribute, Rubric, ScaleKind, alias_forms
from clinjudge.rubrics._schema import normalise_key as _normalise_key

_THINK_OPEN = re.compile(r"<(think|thinking|reasoning)>", re.IGNORECASE)
_OPEN_THINK = re.compile(r"^\s*<(think|thinking|reasoning)>", re.IGNORECASE)
_CLOSE_THINK = re.compile(r"</(think|thinking|reasoning)>", re.IGNORECASE)
_TRAILING_COMMA = re.compile(r",(\s*[}\]])")
_BARE_WORDS = re.compile(r":\s*(NA|N/A|None|nan|True|False)(\s*[,}])")
# Possessive runs of spaces: a long run followed by junk must not backtrack quadratically.
_NUMBER_TEXT = re.compile(r"^\s*+(-?\d+(?:\.0+)?)\s*+(?:/\s*+\d+)?\s*+(?:[-:(].*)?$", re.DOTALL)
_NULL_WORDS = {"na", "n/a", "n.a.", "null", "none", "not applicable", "not_applicable", ""}
_YES_NO = {"yes": 1, "y": 1, "true": 1, "present": 1, "no": 0, "n": 0, "false": 0, "absent": 0}
_SCORE_FIELDS = ("score", "value", "grade", "rating", "answer")
_TEXT_FIELDS = ("explanation", "rationale", "reason", "reasoning", "justification", "comment")
_WRAPPERS = ("scores", "ratings", "grades", "evaluation", "evaluations", "result", "results")
_KEY_CACHE_LENGTH = 80
"""Keys up to this length have their normal form remembered (a reply's keys repeat, reply after
reply; a hostile reply's long keys are folded every time instead of filling memory)."""


@lru_cache(maxsize=4096)
def _cached_normal_form(text: str) -> str:
    return _normalise_key(text)


def normalise_key(text: str) -> str:
    """:func:`clinjudge.rubrics._schema.normalise_key`, remembered for short keys."""
    return _cached_normal_form(text) if len(text) <= _KEY_CACHE_LENGTH else _normalise_key(text)


_OVERALL_RATIONALE = {normalise_key(k) for k in (*_TEXT_FIELDS, "comments", "summary", "notes")}


class JudgmentParseError(ClinJudgeError, ValueError):
    """A reply could not be turned into a valid judgment."""


@dataclass
class ParsedJudgment:
    """A validated judgment.

    Args:
        values: Score per wire key (None where the rubric allows null).
        rationales: Explanation per wire key, where the judge gave one.
        rationale: Overall rationale, where the judge gave one.
        coerced: Scores the judge gave where the gate says null, stored as null (by key).
        notes: What the reading had to decide that the judge left ambiguous (e.g. which of
            two JSON objects with different scores it read).
    """

    values: dict[str, int | None]
    rationales: dict[str, str] = field(default_factory=dict)
    rationale: str | None = None
    coerced: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


_THINK_CLOSE = {
    name: re.compile(rf"</{name}>", re.IGNORECASE) for name in ("think", "thinking", "reasoning")
}


def _remove_closed_blocks(text: str) -> str:
    """Drop every closed ``<think>…</think>`` block (and its kin) in one pass.

    Linear on hostile replies: a tag name whose closing tag is missing after some point is never
    searched for again, where a lazy regex would rescan the rest of the text for every opener.
    """
    kept: list[str] = []
    position, unclosed = 0, set()
    for opener in _THINK_OPEN.finditer(text):
        name = opener.group(1).lower()
        if opener.start() < position or name in unclosed:
            continue
        closer = _THINK_CLOSE[name].search(text, opener.end())
        if closer is None:
            unclosed.add(name)
            continue
        kept += [text[position : opener.start()], " "]
        position = closer.end()
    kept.append(text[position:])
    return "".join(kept)


def strip_reasoning(text: str) -> str:
    """A reply without its reasoning blocks (``<think>`` and kin, closed, unopened or unclosed).

    Args:
        text: A model reply.
    """
    stripped = _remove_closed_blocks(text)
    closers = list(_CLOSE_THINK.finditer(stripped))
    if closers:
        # A closing tag without its opening one: the chat template opened the reasoning block
        # in the prompt (DeepSeek-R1, Qwen3). Everything up to the last closing tag is reasoning.
        stripped = stripped[closers[-1].end() :]
    if _OPEN_THINK.match(stripped):
        # An unclosed <think>: a truncated or sloppy reasoning block. Keep whatever follows it.
        stripped = _OPEN_THINK.sub(" ", stripped, count=1)
    return stripped


class _ReadObject(dict[str, Any]):
    """A JSON object as read from a reply, with the keys it gave more than once (a parser
    keeps the last silently; which score the judge meant is then unknown)."""

    repeated: dict[str, list[Any]]


def _object_of(pairs: list[tuple[str, Any]]) -> _ReadObject:
    read = _ReadObject(pairs)
    read.repeated = {}
    if len(read) < len(pairs):
        seen: dict[str, list[Any]] = {}
        for key, value in pairs:
            seen.setdefault(key, []).append(value)
        read.repeated = {k: v for k, v in seen.items() if len(v) > 1}
    return read


def _decode_at(text: str, start: int, decoder: json.JSONDecoder) -> tuple[Any, int] | None:
    try:
        return decoder.raw_decode(text, start)
    except json.JSONDecodeError:
        pass
    end = closing_bracket(text, start)
    if end is None:
        return None
    fragment = _TRAILING_COMMA.sub(r"\1", text[start:end])
    fragment = _BARE_WORDS.sub(lambda m: f": {_bare_word(m.group(1))}{m.group(2)}", fragment)
    try:
        return json.loads(fragment, object_pairs_hook=_object_of), end
    except json.JSONDecodeError:
        return None


def closing_bracket(text: str, start: int, *, single_quotes: bool = False) -> int | None:
    """Index just past the bracket that closes the ``{`` or ``[`` at ``start``; None if none.

    Brackets inside quoted strings do not count. Linear in the length of the text.

    Args:
        text: Free text holding JSON (or a Python-style literal).
        start: Index of the opening bracket.
        single_quotes: Also read ``'...'`` as a string (Python-style dicts), except a quote
            right after a letter or digit, which is an apostrophe.
    """
    depth, quote, escaped = 0, "", False
    for index in range(start, len(text)):
        char = text[index]
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = ""
            continue
        if char == '"' or (single_quotes and char == "'" and not text[index - 1 : index].isalnum()):
            quote = char
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
            if depth == 0:
                return index + 1
    return None


def _bare_word(word: str) -> str:
    return {"true": "true", "false": "false"}.get(word.lower(), "null")


def json_objects(text: str) -> list[dict[str, Any]]:
    """Every top-level JSON object found in free text, in order of appearance.

    Args:
        text: A model reply, possibly with prose, fences or reasoning around the JSON.
    """
    decoder = json.JSONDecoder(object_pairs_hook=_object_of)
    found: list[dict[str, Any]] = []
    index = text.find("{")
    while index != -1:
        decoded = _decode_at(text, index, decoder)
        if decoded is not None and isinstance(decoded[0], dict):
            found.append(decoded[0])
            index = text.find("{", decoded[1])
        else:
            index = text.find("{", index + 1)
    return found


_ALIAS_CACHE: dict[tuple[Any, ...], dict[str, str]] = {}


def _alias_map(rubric: Rubric) -> dict[str, str]:
    cache_key = tuple((a.key, a.name, tuple(a.aliases)) for a in rubric.attributes)
    cached = _ALIAS_CACHE.get(cache_key)
    if cached is None:
        cached = {form: a.key for a in rubric.attributes for form in alias_forms(a)}
        _ALIAS_CACHE[cache_key] = cached
    return cached


@dataclass(frozen=True)
class _Reading:
    """What parsing needs of a rubric, worked out once per rubric object (rubrics are not
    changed after loading; the entry holds the rubric, so its id is not reused)."""

    rubric: Rubric
    aliases: dict[str, str]
    plain: frozenset[str]
    """Keys a reply may use as they are: each folds to itself, so the forgiving reading would
    map it to itself too."""
    rationale_plain: bool
    """``rationale`` is no attribute's alias: the forgiving reading takes it as the overall
    rationale."""
    keys: tuple[str, ...]
    """The rubric's keys in output order."""
    checks: tuple[tuple[str, frozenset[int | None], Attribute], ...]
    """Each attribute's key and the values its JSON Schema allows."""
    gates: tuple[tuple[str, str, int], ...]
    """(key, gating key, the gating value that makes the key null) of each gated attribute,
    in the rubric's order."""
    all_plain: bool = False
    """Every key is plain: a reply of exactly the keys (and the rationale) may be exact."""
    strict: bool = False
    """The rubric's gate setting is ``strict`` (a score where the gate says null is refused)."""


_READINGS: dict[int, _Reading] = {}


def _reading(rubric: Rubric) -> _Reading:
    known = _READINGS.get(id(rubric))
    if known is not None and known.rubric is rubric:
        return known
    aliases = _alias_map(rubric)
    plain = frozenset(
        k
        for k in rubric.keys
        if aliases.get(normalise_key(k)) == k and not k.startswith("__rationale__")
    )
    rationale = normalise_key(RATIONALE_KEY)
    reading = _Reading(
        rubric,
        aliases,
        plain,
        rationale not in aliases,
        keys=tuple(rubric.keys),
        checks=tuple(
            (a.key, _allowed(a.scale, a.min, a.max, a.nullable), a) for a in rubric.attributes
        ),
        gates=tuple(
            (a.key, a.gate.attribute, a.gate.null_when)
            for a in rubric.attributes
            if a.gate is not None
        ),
        all_plain=plain == frozenset(rubric.keys),
        strict=rubric.settings.gate == "strict",
    )
    if len(_READINGS) >= 64:
        _READINGS.clear()
    _READINGS[id(rubric)] = reading
    return reading


def _exact_fields(
    candidate: dict[str, Any], reading: _Reading
) -> tuple[dict[str, int | None], dict[str, str], str | None, list[str]] | None:
    """The fields of a reply in the exact shape the schema asks for (rubric keys with integer
    or null values, and a text ``rationale``), read without the forgiving steps; None for any
    other shape. The result equals what :func:`_extract_fields` makes of such a reply."""
    values: dict[str, int | None] = {}
    overall: str | None = None
    for name, raw in candidate.items():
        if name in reading.plain and (raw is None or type(raw) is int):
            values[name] = raw
        elif name == RATIONALE_KEY and reading.rationale_plain and isinstance(raw, str):
            overall = raw
        else:
            return None
    if not values:
        return None
    return values, {}, overall, []


def _unwrap(candidate: dict[str, Any], aliases: dict[str, str]) -> dict[str, Any]:
    """Merge score containers such as {"scores": {...}, "rationale": {...}} into one level."""
    merged = dict(candidate)
    for name, inner in candidate.items():
        if normalise_key(name) in _WRAPPERS and isinstance(inner, dict):
            merged.pop(name)
            merged.update(inner)
    for name, inner in list(merged.items()):
        folded = normalise_key(name)
        if folded in _OVERALL_RATIONALE and isinstance(inner, dict):
            merged.pop(name)
            for key, text in inner.items():
                wire = aliases.get(normalise_key(key))
                if wire and isinstance(text, str):
                    merged.setdefault(f"__rationale__{wire}", text)
    return merged


def _coverage(candidate: dict[str, Any], aliases: dict[str, str]) -> int:
    flat = _unwrap(candidate, aliases)
    return len({aliases[normalise_key(k)] for k in flat if normalise_key(k) in aliases})


def _coerce(raw: Any, attribute: Attribute) -> int | None:
    """Turn one raw value into a score or None; raise ValueError with a short reason."""
    if raw is None:
        return None
    if isinstance(raw, bool):
        if attribute.scale is not ScaleKind.binary:
            raise ValueError(f"{str(raw).lower()} is not a {attribute.scale.value} score")
        return int(raw)
    if isinstance(raw, int):
        return raw
    if isinstance(raw, float):
        if raw != raw:  # NaN
            return None
        if raw.is_integer():
            return int(raw)
        raise ValueError(f"{raw} is not a whole number")
    if isinstance(raw, str):
        folded = raw.strip().lower()
        if folded in _NULL_WORDS:
            return None
        if attribute.scale is ScaleKind.binary and folded in _YES_NO:
            return _YES_NO[folded]
        match = _NUMBER_TEXT.match(raw)
        if match:
            return int(float(match.group(1)))
        raise ValueError(f"{raw!r} is not a score")
    if isinstance(raw, list):
        numbers = [v for v in raw if isinstance(v, int | float | str) and _is_number(v)]
        if len(numbers) == 1:
            return _coerce(numbers[0], attribute)
        raise ValueError(f"cannot read a single score from {raw!r}")
    raise ValueError(f"{type(raw).__name__} is not a score")


def _is_number(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return True
    return bool(_NUMBER_TEXT.match(value)) and value.strip()[:1].isdigit()


def _split_entry(raw: Any) -> tuple[Any, str | None]:
    if isinstance(raw, dict):
        folded = {normalise_key(k): v for k, v in raw.items()}
        score = next((folded[k] for k in _SCORE_FIELDS if k in folded), raw)
        text = next((folded[k] for k in _TEXT_FIELDS if isinstance(folded.get(k), str)), None)
        if score is raw:
            raise ValueError("object has no score field")
        return score, text
    if (
        isinstance(raw, list)
        and len(raw) == 2
        and isinstance(raw[0], str)
        and not _is_number(raw[0])
    ):
        return raw[1], raw[0]
    return raw, None


@lru_cache(maxsize=1024)
def _allowed(scale: ScaleKind, low: int, high: int, nullable: bool) -> frozenset[int | None]:
    enum = allowed_values(scale_schema(scale, low, high, nullable))
    # A proportion (computed, never asked) has no enum; it is never parsed from a reply.
    return frozenset(range(low, high + 1)) if enum is None else frozenset(enum)


def _range_problem(value: int | None, attribute: Attribute) -> str:
    """Why a value the attribute's JSON Schema (the request's contract too) rules out fails."""
    if value is None:
        return f"{attribute.key} is null but must be a score"
    return f"{attribute.key}={value} is outside {attribute.min}..{attribute.max}"


def _gate_aliases(values: dict[str, int | None], reading: _Reading) -> None:
    """Read 0 as NA for a gated attribute whose gate says null (a common model habit)."""
    for key, gating, null_when in reading.gates:
        if values.get(gating) == null_when and values.get(key) == 0:
            values[key] = None


def _coerce_gated(values: dict[str, int | None], reading: _Reading) -> dict[str, int]:
    """Null the scores given where a gate says null; returns the scores given (by key)."""
    coerced: dict[str, int] = {}
    if reading.rubric.settings.gate == "strict":
        return coerced
    for key, gating, null_when in reading.gates:
        value = values.get(key)
        if value is not None and values.get(gating) == null_when:
            coerced[key] = value
            values[key] = None
    return coerced


def _extract_fields(
    flat: dict[str, Any], rubric: Rubric, aliases: dict[str, str]
) -> tuple[dict[str, int | None], dict[str, str], str | None, list[str]]:
    values: dict[str, int | None] = {}
    rationales: dict[str, str] = {}
    problems: list[str] = []
    overall: str | None = None
    for name, raw in flat.items():
        if name.startswith("__rationale__"):
            rationales.setdefault(name.removeprefix("__rationale__"), raw)
            continue
        folded = normalise_key(name)
        wire = aliases.get(folded)
        if wire is None:
            if folded in _OVERALL_RATIONALE and isinstance(raw, str):
                overall = raw
            continue
        attribute = rubric.attribute(wire)
        try:
            score, text = _split_entry(raw)
            value = _coerce(score, attribute)
        except ValueError as exc:
            problems.append(f"{wire}: {exc}")
            continue
        if wire in values and values[wire] != value:
            problems.append(f"{wire}: given twice with different values ({values[wire]}, {value})")
            continue
        values[wire] = value
        if text:
            rationales[wire] = text
    return values, rationales, overall, problems


def _holds_score(raw: Any) -> bool:
    """Whether a value reads as a score (a number, a number's text, a score object)."""
    if isinstance(raw, bool):
        return False
    if isinstance(raw, int | float):
        return True
    if isinstance(raw, str):
        return _is_number(raw)
    if isinstance(raw, dict):
        return any(normalise_key(k) in _SCORE_FIELDS for k in raw)
    return False


def _unknown_keys(flat: dict[str, Any], reading: _Reading) -> tuple[list[str], list[str]]:
    """Problems and notes for keys the rubric's schema does not allow (it allows no others).

    A score under a name that holds a rubric key (``accurate_extra``) may be the score the
    judge meant for that attribute: refused, so the judge is asked again. Any other extra key
    (``overall``, ``confidence``) holds nothing the rubric scores: read past, with a note.
    """
    problems: list[str] = []
    ignored: list[str] = []
    for name, raw in flat.items():
        folded = normalise_key(name)
        if (
            name.startswith("__rationale__")
            or folded in reading.aliases
            or folded in _OVERALL_RATIONALE
        ):
            continue
        near = next((k for k in reading.keys if normalise_key(k) in folded), None)
        if near is not None and _holds_score(raw):
            problems.append(f"{name[:40]}: not a key of the rubric, yet it scores like {near}")
        else:
            ignored.append(name[:40])
    notes = [f"keys not in the rubric read past: {', '.join(ignored)}"] if ignored else []
    return problems, notes


def _repeat_problems(candidate: dict[str, Any], aliases: dict[str, str]) -> list[str]:
    """A rubric key the object (or a score container in it) gives twice, differently."""
    objects = [candidate]
    objects += [v for k, v in candidate.items() if normalise_key(k) in _WRAPPERS]
    problems = []
    for found in objects:
        for name, values in getattr(found, "repeated", {}).items():
            wire = aliases.get(normalise_key(name))
            if wire is not None and len({json.dumps(v, sort_keys=True) for v in values}) > 1:
                problems.append(f"{wire}: key given {len(values)} times with different values")
    return problems


def _conflict_note(
    candidates: list[dict[str, Any]], rubric: Rubric, aliases: dict[str, str]
) -> str | None:
    """A note when two JSON objects of one reply score an attribute differently. The most
    complete object is read (the last of equals: a judge that corrects itself writes its
    answer again below), and the note keeps the trace of the choice."""
    scored: dict[str, int | None] = {}
    for candidate in candidates:
        values = _extract_fields(_unwrap(candidate, aliases), rubric, aliases)[0]
        for key, value in values.items():
            if key in scored and scored[key] != value:
                return (
                    f"the reply holds {len(candidates)} JSON objects that score {key} "
                    f"differently ({scored[key]}, {value}); the most complete, last one was read"
                )
            scored[key] = value
    return None


def _may_repeat(text: str, reading: _Reading) -> bool:
    """Whether a rubric key may be given twice (orjson keeps the last of a repeated key)."""
    return any(text.count(f'"{key}"') > 1 for key in reading.keys)


def _whole_object(text: str) -> dict[str, Any] | None:
    """The reply as the one object it is, when it is nothing but a JSON object that orjson reads
    (what structured output sends); None sends the reply through the forgiving extraction.

    The object the extraction would find alone: without a ``<`` no reasoning block can be
    stripped, and a text that is one object with only whitespace around it holds no other.
    What orjson refuses (NaN, lone surrogates, trailing text) takes the forgiving path.
    """
    body = text.strip()
    if not (body.startswith("{") and body.endswith("}")) or "<" in text:
        return None
    try:
        decoded = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return decoded if isinstance(decoded, dict) else None


_MISSING = object()


def _accept_exact(candidate: dict[str, Any], reading: _Reading) -> ParsedJudgment | None:
    """The judgment of a reply in the schema's exact shape that breaks no rule, as
    :func:`parse_judgment` makes it; None for any other reply (that path then reads and reports
    it). Every sample of a run with structured output comes this way, in one pass.
    """
    keys = reading.keys
    if not reading.all_plain:
        return None
    overall: str | None = None
    extra = len(candidate) - len(keys)
    if extra:
        # The one key beside the rubric's may only be a text rationale (every rubric key must
        # be found below, so nothing else is left over).
        overall = candidate.get(RATIONALE_KEY)
        if extra != 1 or not reading.rationale_plain or not isinstance(overall, str):
            return None
    values: dict[str, int | None] = {}
    for key in keys:  # in the rubric's order, as the judgment keeps them
        raw = candidate.get(key, _MISSING)
        if raw is not None and type(raw) is not int:  # missing, or not an integer or null
            return None
        values[key] = raw
    coerced: dict[str, int] = {}
    gates = reading.gates
    if gates:
        # _gate_aliases, then _coerce_gated, on values that hold every key.
        for key, gating, null_when in gates:
            if values[gating] == null_when and values[key] == 0:
                values[key] = None
        if not reading.strict:
            for key, gating, null_when in gates:
                value = values[key]
                if value is not None and values[gating] == null_when:
                    coerced[key] = value
                    values[key] = None
    for key, allowed, _ in reading.checks:
        if values[key] not in allowed:
            return None
    for key, gating, null_when in gates:
        # Rubric.gate_violation's two rules, from the gates worked out once per rubric.
        if (values[gating] == null_when) is not (values[key] is None):
            return None
    return ParsedJudgment(values=values, rationales={}, rationale=overall, coerced=coerced)


def parse_judgment(text: str | None, rubric: Rubric) -> ParsedJudgment:
    """Extract and validate a judgment from a model reply.

    Args:
        text: The reply text.
        rubric: The rubric the reply must satisfy.

    Raises:
        JudgmentParseError: The reply has no usable JSON or fails validation.
    """
    if text is None or not text.strip():
        raise JudgmentParseError("empty reply")
    reading = _reading(rubric)
    aliases = reading.aliases
    whole = _whole_object(text)
    if whole is not None and _may_repeat(text, reading):
        whole = None  # read below, where a repeated key is seen
    if whole is not None:
        accepted = _accept_exact(whole, reading)
        if accepted is not None:
            return accepted
    # Anything the exact path does not accept as it is (a reply in another shape, or one that
    # breaks a rule) is read and reported below, as it always was.
    exact = _exact_fields(whole, reading) if whole is not None else None
    notes: list[str] = []
    if exact is not None:
        values, rationales, overall, problems = exact
    else:
        # Any other reply is read exactly as before, from the text (orjson differs from json
        # at the edges, e.g. it reads integers beyond 64 bits as floats).
        candidates = json_objects(strip_reasoning(text))
        if not candidates:
            raise JudgmentParseError("no JSON object found in the reply")
        ranked = [(_coverage(c, aliases), i) for i, c in enumerate(candidates)]
        best_coverage, best_index = max(ranked)
        if best_coverage == 0:
            raise JudgmentParseError("no JSON object in the reply uses the rubric's keys")
        flat = _unwrap(candidates[best_index], aliases)
        values, rationales, overall, problems = _extract_fields(flat, rubric, aliases)
        problems += _repeat_problems(candidates[best_index], aliases)
        unknown, notes = _unknown_keys(flat, reading)
        problems += unknown
        covering = [c for c, (coverage, _) in zip(candidates, ranked, strict=True) if coverage]
        if len(covering) > 1:
            note = _conflict_note(covering, rubric, aliases)
            notes += [note] if note else []
    keys = reading.keys
    if problems:
        reported = {p.split(":", 1)[0] for p in problems}
        missing = [k for k in keys if k not in values and k not in reported]
    else:
        missing = [k for k in keys if k not in values]
    if missing:
        problems.append("missing keys: " + ", ".join(missing))
    _gate_aliases(values, reading)
    coerced = _coerce_gated(values, reading)
    for key, allowed, attribute in reading.checks:
        if key in values and values[key] not in allowed:
            problems.append(_range_problem(values[key], attribute))
    if not problems:
        gate_problem = rubric.gate_violation(values)
        if gate_problem:
            problems.append(gate_problem)
    if problems:
        raise JudgmentParseError("; ".join(problems))
    ordered = {k: values[k] for k in keys}
    return ParsedJudgment(
        values=ordered, rationales=rationales, rationale=overall, coerced=coerced, notes=notes
    )
