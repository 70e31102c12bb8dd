"""Read DocLens replies: claim lists, entailment verdicts and citation judgments.

Lenient about form (code fences, reasoning blocks, prose around the JSON, single-quoted
Python-style dicts, trailing commas, ``Claim 3:`` lines, verdicts written as 1/0, yes/no or
words), strict about content: a reply that yields no usable verdict raises
:class:`DocLensParseError` with a reason; nothing is ever defaulted.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import Any

from clinjudge.errors import ClinJudgeError
from clinjudge.rubrics import closing_bracket, strip_reasoning

_TRAILING_COMMA = re.compile(r",(\s*[}\]])")
# A quoted string (kept as is) or a JSON literal outside strings (turned into Python's).
_JSON_WORDS = re.compile(r"(\"(?:\\.|[^\"\\])*\"|'(?:\\.|[^'\\])*')|\b(true|false|null)\b")
_CLAIM_LINE = re.compile(r"^\s*(?:[-*\u2022]\s*)?claim\s*\d+\s*[:.)-]\s*(.+?)\s*$", re.IGNORECASE)
_LIST_LINE = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s+(.+?)\s*$")
_VERDICT_LINE = re.compile(
    r"(?:entailment_prediction|prediction|entailed|verdict|label)\s*[:=]\s*\"?'?([A-Za-z01_ ]+)",
    re.IGNORECASE,
)
_EXPLANATION_LINE = re.compile(r"explanation\s*[:=]\s*(.+)", re.IGNORECASE)
_PROVENANCE_LINE = re.compile(r"(?:provenance|supporting)\s*[:=]\s*(.+)", re.IGNORECASE)
_VERDICT_KEYS = (
    "entailed",
    "entailment_prediction",
    "entailment",
    "verdict",
    "prediction",
    "label",
    "supported",
    "answer",
)
_EXPLANATION_KEYS = ("explanation", "reason", "reasoning", "rationale", "justification")
_SUPPORT_KEYS = ("supporting", "provenance", "supporting_citations", "citations", "support")
_ID_KEYS = ("id", "idx", "index", "claim_id", "number", "n")
_LIST_KEYS = ("claims", "results", "judgments", "verdicts", "entailments", "items", "answers")
_TRUE_WORDS = {"1", "true", "yes", "y", "entailed", "entails", "supported", "fully entailed"}
_FALSE_WORDS = {
    "0", "false", "no", "n", "not entailed", "not_entailed", "unsupported", "not supported",
    "contradicted", "neutral", "partially entailed", "partial",
}  # fmt: skip


class DocLensParseError(ClinJudgeError, ValueError):
    """A DocLens reply could not be read."""


@dataclass
class Entailment:
    """One entailment verdict.

    Args:
        entailed: Whether the claim or statement is fully supported.
        explanation: The judge's reason.
        supporting: Source unit numbers the judge named as support (citation judgments).
        claim: The claim text the judge echoed, if any.
    """

    entailed: bool
    explanation: str | None = None
    supporting: list[int] = field(default_factory=list)
    claim: str | None = None


def _load(fragment: str) -> Any:
    for candidate in (fragment, _TRAILING_COMMA.sub(r"\1", fragment)):
        try:
            return json.loads(candidate)
        except json.JSONDecodeError:
            pass
    pythonish = _JSON_WORDS.sub(
        lambda m: m.group(1) or {"true": "True", "false": "False"}.get(m.group(2), "None"),
        fragment,
    )
    try:
        return ast.literal_eval(_TRAILING_COMMA.sub(r"\1", pythonish))
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None


def json_values(text: str) -> list[Any]:
    """Top-level JSON arrays and objects found in free text, in order.

    Args:
        text: A model reply.
    """
    text = strip_reasoning(text)
    found: list[Any] = []
    index = 0
    while True:
        match = re.compile(r"[\[{]").search(text, index)
        if match is None:
            return found
        end = closing_bracket(text, match.start(), single_quotes=True)
        value = _load(text[match.start() : end]) if end else None
        if isinstance(value, list | dict):
            found.append(value)
            index = end or match.start() + 1
        else:
            index = match.start() + 1


def _folded(mapping: dict[Any, Any]) -> dict[str, Any]:
    return {re.sub(r"[\W_]+", "_", str(k).lower()).strip("_"): v for k, v in mapping.items()}


def _first(mapping: dict[str, Any], keys: tuple[str, ...]) -> Any:
    return next((mapping[k] for k in keys if k in mapping), None)


def _as_text_list(value: Any) -> list[str] | None:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [v for v in value]
    if isinstance(value, list) and all(isinstance(v, dict) for v in value):
        texts = [_first(_folded(v), ("claim", "text", "fact", "statement")) for v in value]
        if texts and all(isinstance(t, str) for t in texts):
            return texts
    return None


def _clean_claims(claims: list[str]) -> list[str]:
    cleaned: list[str] = []
    for claim in claims:
        text = " ".join(claim.split()).strip()
        text = re.sub(r"^claim\s*\d+\s*[:.)-]\s*", "", text, flags=re.IGNORECASE)
        if text and text not in cleaned:
            cleaned.append(text)
    return cleaned


def parse_claims(text: str | None) -> list[str]:
    """Claims from an extraction reply: a JSON list, ``{"claims": [...]}``, ``Claim N:`` lines
    or a bulleted/numbered list.

    Args:
        text: The reply.

    Raises:
        DocLensParseError: No claims could be read.
    """
    if text is None or not text.strip():
        raise DocLensParseError("empty reply")
    for value in json_values(text):
        if isinstance(value, dict):
            lists = [v for v in value.values() if isinstance(v, list)]
            named = _first(_folded(value), _LIST_KEYS + ("facts", "atomic_claims"))
            value = named if named is not None or len(lists) != 1 else lists[0]
        claims = _as_text_list(value)
        if claims is not None:
            cleaned = _clean_claims(claims)
            if cleaned:
                return cleaned
            raise DocLensParseError("the reply's claim list is empty")
    body = strip_reasoning(text)
    for pattern in (_CLAIM_LINE, _LIST_LINE):
        lines = [m.group(1) for m in map(pattern.match, body.splitlines()) if m]
        cleaned = _clean_claims(lines)
        if cleaned:
            return cleaned
    raise DocLensParseError("no claim list found in the reply (expected a JSON list of strings)")


def coerce_verdict(raw: Any) -> bool:
    """A verdict from 1/0, booleans or words.

    Raises:
        ValueError: The value is not a verdict.
    """
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, int | float) and raw in (0, 1):
        return bool(raw)
    if isinstance(raw, str):
        folded = " ".join(raw.strip().strip("'\".").lower().replace("_", " ").split())
        if folded in _TRUE_WORDS:
            return True
        if folded in _FALSE_WORDS or folded.replace(" ", "_") in _FALSE_WORDS:
            return False
    raise ValueError(f"{raw!r} is not an entailment verdict (use 1 or 0)")


def _as_numbers(raw: Any) -> list[int]:
    if raw is None:
        return []
    if isinstance(raw, bool):
        raise ValueError(f"{raw!r} is not a list of source numbers")
    if isinstance(raw, int):
        return [raw]
    if isinstance(raw, float) and raw.is_integer():
        return [int(raw)]
    if isinstance(raw, str):
        return [int(n) for n in re.findall(r"\d+", raw)]
    if isinstance(raw, list):
        numbers: list[int] = []
        for value in raw:
            numbers.extend(n for n in _as_numbers(value) if n not in numbers)
        return numbers
    raise ValueError(f"{raw!r} is not a list of source numbers")


def _entry(mapping: dict[Any, Any]) -> Entailment:
    folded = _folded(mapping)
    raw = _first(folded, _VERDICT_KEYS)
    if raw is None:
        raise ValueError("no verdict field")
    explanation = _first(folded, _EXPLANATION_KEYS)
    claim = _first(folded, ("claim", "statement", "text"))
    return Entailment(
        coerce_verdict(raw),
        explanation if isinstance(explanation, str) else None,
        _as_numbers(_first(folded, _SUPPORT_KEYS)),
        claim if isinstance(claim, str) else None,
    )


def _norm(text: str) -> str:
    return re.sub(r"[\W_]+", " ", text.lower()).strip()


def _entries(text: str) -> list[dict[Any, Any]]:
    for value in json_values(text):
        if isinstance(value, dict):
            inner = _first(_folded(value), _LIST_KEYS)
            lists = [v for v in value.values() if isinstance(v, list) and v]
            if not isinstance(inner, list) and len(lists) == 1:
                inner = lists[0]  # JSON mode wraps the list in an object under any key
            if isinstance(inner, list):
                value = inner
            elif _first(_folded(value), _VERDICT_KEYS) is not None:
                value = [value]
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            return value
    return []


def _verdict_entries(text: str | None) -> list[dict[Any, Any]]:
    """The entries of the verdict list in a reply; an error when there is none."""
    if text is None or not text.strip():
        raise DocLensParseError("empty reply")
    entries = _entries(text)
    if not entries:
        raise DocLensParseError("no JSON list of verdicts found in the reply")
    return entries


def parse_entailments(text: str | None, claims: list[str]) -> list[Entailment | None]:
    """Verdicts for a batch of claims; None where the reply gives no valid verdict for a claim.

    Entries are matched to claims by their ``id`` (1-based, as shown to the judge), else by the
    echoed claim text, else by position when the reply has exactly one entry per claim.

    Args:
        text: The reply.
        claims: The claims sent, in order.

    Raises:
        DocLensParseError: The reply holds no list of verdicts at all.
    """
    entries = _verdict_entries(text)
    result: list[Entailment | None] = [None] * len(claims)
    by_text = {_norm(c): i for i, c in enumerate(claims)}
    positional = len(entries) == len(claims)
    for position, raw in enumerate(entries):
        try:
            entry = _entry(raw)
        except ValueError:
            continue
        ids = (
            _as_numbers(_first(_folded(raw), _ID_KEYS))
            if _first(_folded(raw), _ID_KEYS) is not None
            else []
        )
        if len(ids) == 1 and 1 <= ids[0] <= len(claims):
            slot = ids[0] - 1
        elif entry.claim is not None and _norm(entry.claim) in by_text:
            slot = by_text[_norm(entry.claim)]
        elif positional:
            slot = position
        else:
            continue
        if result[slot] is None:
            result[slot] = entry
    return result


def parse_entailment(text: str | None) -> Entailment:
    """One verdict (per-claim or citation call): a JSON object, or ``explanation:`` /
    ``entailment_prediction:`` / ``provenance:`` lines.

    Args:
        text: The reply.

    Raises:
        DocLensParseError: No valid verdict in the reply.
    """
    if text is None or not text.strip():
        raise DocLensParseError("empty reply")
    problem = "no verdict found in the reply"
    for value in json_values(text):
        candidates = value if isinstance(value, list) else [value]
        for candidate in candidates:
            if not isinstance(candidate, dict):
                continue
            try:
                return _entry(candidate)
            except ValueError as exc:
                problem = str(exc)
    body = strip_reasoning(text)
    verdict = _VERDICT_LINE.search(body)
    if verdict:
        said = verdict.group(1).strip()
        try:
            entailed = coerce_verdict(said)
        except ValueError:
            try:
                entailed = coerce_verdict(said.split()[0] if said else said)
            except ValueError as exc:
                raise DocLensParseError(str(exc)) from None
        explanation = _EXPLANATION_LINE.search(body)
        support = _PROVENANCE_LINE.search(body)
        return Entailment(
            entailed,
            explanation.group(1).strip() if explanation else None,
            _as_numbers(support.group(1)) if support else [],
        )
    raise DocLensParseError(problem)


def parse_keyed(text: str | None, ids: list[str]) -> dict[str, Entailment]:
    """Verdicts keyed by string ids (panel discussions); ids the reply misses are absent.

    Args:
        text: The reply.
        ids: The ids asked about.

    Raises:
        DocLensParseError: The reply holds no list of verdicts at all.
    """
    entries = _verdict_entries(text)
    wanted = set(ids)
    found: dict[str, Entailment] = {}
    for raw in entries:
        key = _first(_folded(raw), _ID_KEYS)
        if key is None or str(key).strip() not in wanted:
            continue
        try:
            found.setdefault(str(key).strip(), _entry(raw))
        except ValueError:
            continue
    return found
