"""Simulated replies to DocLens prompts, for the ``mock/`` provider.

The rules are cheap and deterministic, not judgments: claims are the clauses of the fenced text;
a claim is entailed when most of its content words occur in the document, and a small share of
verdicts is flipped by a hash of the request (so members of a panel disagree now and then and
metrics are not trivially perfect); a cited unit supports a statement when they share content
words. Prompt kinds are recognised by the marker constants of
:mod:`clinjudge.judges.doclens._prompts`, so the prompts and this responder cannot drift apart.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from clinjudge.judges.clients import register_simulated_replies
from clinjudge.judges.doclens._citations import split_statements
from clinjudge.judges.doclens._prompts import (
    BATCH_MARKER,
    CITATION_MARKER,
    DECISION_MARKER,
    DISCUSSION_MARKER,
    EXTRACTION_MARKER,
    SINGLE_MARKER,
)

NOTE = "SIMULATED (mock provider)"
"""Prefix of every explanation the simulated judge writes."""

ENTAILMENT_THRESHOLD = 0.7
"""Share of a claim's content words the document must hold for an entailed verdict."""

CITATION_THRESHOLD = 0.5
"""The same for a statement against its cited units, looser because dialogue paraphrases."""

FLIP_PERCENT = 10
"""Share of verdicts (in percent) flipped by the request hash."""

_LIMITS = re.compile(r"at least (\d+) and at most (\d+) claims")
_UNIT_LINE = re.compile(r"^\[(\d+)\] ?(.*)$")
_CLAUSE_SPLIT = re.compile(r";\s+|,?\s+and\s+", re.IGNORECASE)
_STOPWORDS = frozenset(
    {"a", "an", "the", "and", "or", "of", "for", "to", "in", "on", "at", "by", "with", "from",
     "as", "is", "are", "was", "were", "be", "been", "has", "have", "had", "her", "his", "she",
     "he", "they", "their", "them", "it", "its", "this", "that", "these", "those", "patient",
     "also", "any", "some"}
)  # fmt: skip


def _blocks(text: str, tag: str) -> list[str]:
    return re.findall(rf"<{tag}>\n(.*?)\n</{tag}>", text, re.DOTALL)


def _block(text: str, tag: str) -> str:
    found = _blocks(text, tag)
    return found[0] if found else ""


def content_words(text: str) -> set[str]:
    """Lower-cased words that carry meaning (stopwords dropped, a plural ``s`` folded).

    Args:
        text: Any text.
    """
    words = re.findall(r"[a-z0-9%]+", text.lower())
    return {w[:-1] if len(w) > 4 and w.endswith("s") else w for w in words if w not in _STOPWORDS}


def coverage(claim: str, document: str) -> float:
    """Share of the claim's content words found in the document (1.0 for a wordless claim).

    Args:
        claim: The claim or statement.
        document: The premise.
    """
    words = content_words(claim)
    if not words:
        return 1.0
    return len(words & content_words(document)) / len(words)


def _flipped(seed: str, *parts: str) -> bool:
    digest = hashlib.sha256("\x1f".join((seed, *parts)).encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big") % 100 < FLIP_PERCENT


def _verdict(
    seed: str, claim: str, document: str, threshold: float = ENTAILMENT_THRESHOLD
) -> tuple[int, str]:
    share = coverage(claim, document)
    entailed = share >= threshold
    why = f"{NOTE}: {share:.0%} of the claim's content words occur in the document"
    if _flipped(seed, claim, document):
        entailed = not entailed
        why += "; verdict flipped by the simulation"
    return int(entailed), why + "."


def _clauses(sentence: str) -> list[str]:
    parts = [p.strip(" ,.;") for p in _CLAUSE_SPLIT.split(sentence)]
    if len(parts) > 1 and all(len(p.split()) >= 2 for p in parts):
        return [p[:1].upper() + p[1:] for p in parts]
    return [sentence.strip().rstrip(".!?")]


def simulated_claims(text: str, min_claims: int = 1, max_claims: int = 30) -> list[str]:
    """Claims of a text: its sentences, split further at ``and``/``;`` between clauses.

    Args:
        text: The text to break into claims.
        min_claims: Fewest claims; the longest claims are halved until there are enough.
        max_claims: Most claims; the first ones are kept.
    """
    claims: list[str] = []
    for statement in split_statements(text):
        for clause in _clauses(statement.text):
            if clause and clause not in claims:
                claims.append(clause)
    if not claims and text.strip():  # headings only: the text itself is the one claim
        claims = [" ".join(text.split())]
    while 0 < len(claims) < min_claims:
        longest = max(range(len(claims)), key=lambda i: len(claims[i].split()))
        words = claims[longest].split()
        if len(words) < 2:
            break
        half = len(words) // 2
        claims[longest : longest + 1] = [" ".join(words[:half]), " ".join(words[half:])]
    return claims[:max_claims]


def _extraction(seed: str, system: str, user: str) -> str:
    limits = _LIMITS.search(system)
    low, high = (int(limits.group(1)), int(limits.group(2))) if limits else (1, 30)
    return json.dumps({"claims": simulated_claims(_block(user, "TEXT"), low, high)})


def _numbered(block: str) -> list[str]:
    return [re.sub(r"^\d+\. ", "", line) for line in block.splitlines() if line.strip()]


def _batch(seed: str, system: str, user: str) -> str:
    document = _block(user, "DOCUMENT")
    replies = []
    for number, claim in enumerate(_numbered(_block(user, "CLAIMS")), start=1):
        entailed, why = _verdict(seed, claim, document)
        replies.append({"id": number, "claim": claim, "explanation": why, "entailed": entailed})
    return json.dumps(replies)


def _single(seed: str, system: str, user: str) -> str:
    entailed, why = _verdict(seed, _block(user, "CLAIMS"), _block(user, "DOCUMENT"))
    return json.dumps({"explanation": why, "entailed": entailed})


def _units(block: str) -> dict[int, str]:
    units: dict[int, str] = {}
    last: int | None = None
    for line in block.splitlines():
        match = _UNIT_LINE.match(line)
        if match:
            last = int(match.group(1))
            units[last] = match.group(2)
        elif last is not None:  # a unit that spans lines
            units[last] += "\n" + line
    return units


def _supporting(statement: str, units: dict[int, str]) -> list[int]:
    words = content_words(statement)
    return [n for n, text in units.items() if words & content_words(text)]


def _citation(seed: str, system: str, user: str) -> str:
    statement = _block(user, "STATEMENT")
    units = _units(_block(user, "SOURCE_UNITS"))
    entailed, why = _verdict(seed, statement, "\n".join(units.values()), CITATION_THRESHOLD)
    supporting = _supporting(statement, units) if entailed else []
    return json.dumps({"explanation": why, "supporting": supporting, "entailed": entailed})


def _majority(votes: Sequence[Any], fallback: int) -> int:
    said = [int(v["entailed"]) for v in votes if isinstance(v, dict) and "entailed" in v]
    yes = sum(said)
    if 2 * yes == len(said):
        return fallback
    return int(2 * yes > len(said))


def _disputes(user: str, tag: str) -> list[dict[str, Any]]:
    try:
        loaded = json.loads(_block(user, tag))
    except json.JSONDecodeError:
        return []
    if not isinstance(loaded, list):
        return []
    return [d for d in loaded if isinstance(d, dict) and "id" in d]


def _threshold(dispute: dict[str, Any]) -> float:
    cited = isinstance(dispute.get("cited_units"), dict)
    return CITATION_THRESHOLD if cited else ENTAILMENT_THRESHOLD


def _premise(dispute: dict[str, Any], user: str) -> str:
    """The document a disputed id is judged against: reference claims against the generated
    note, generated claims against the reference, statements against their cited units."""
    cited = dispute.get("cited_units")
    if isinstance(cited, dict):
        return "\n".join(str(t) for t in cited.values())
    reference, generated = (_blocks(user, "DOCUMENT") + ["", ""])[:2]
    return generated if str(dispute["id"]).startswith("recall") else reference


def _discussion(seed: str, system: str, user: str) -> str:
    replies = []
    for dispute in _disputes(user, "VERDICTS"):
        text = str(dispute.get("text", ""))
        own, _ = _verdict(seed, text, _premise(dispute, user), _threshold(dispute))
        entailed = _majority(dispute.get("votes") or [], own)
        why = f"{NOTE}: sides with the panel's majority, or keeps its own rule verdict on a tie."
        replies.append({"id": dispute["id"], "explanation": why, "entailed": entailed})
    return json.dumps(replies)


def _decision(seed: str, system: str, user: str) -> str:
    replies = []
    for dispute in _disputes(user, "DISCUSSION"):
        text = str(dispute.get("text", ""))
        share = coverage(text, _premise(dispute, user))
        entailed = int(share >= _threshold(dispute))  # the chair applies the rule, unflipped
        cited = dispute.get("cited_units")
        units = {int(n): str(t) for n, t in cited.items()} if isinstance(cited, dict) else {}
        replies.append(
            {
                "id": dispute["id"],
                "explanation": f"{NOTE}: {share:.0%} of the content words are supported.",
                "supporting": _supporting(text, units) if entailed else [],
                "entailed": entailed,
            }
        )
    return json.dumps(replies)


_Responder = Callable[[str, str, str], str]

# Checked in this order; each marker occurs in one kind of system prompt only.
_KINDS: tuple[tuple[str, _Responder], ...] = (
    (EXTRACTION_MARKER, _extraction),
    (BATCH_MARKER, _batch),
    (SINGLE_MARKER, _single),
    (CITATION_MARKER, _citation),
    (DISCUSSION_MARKER, _discussion),
    (DECISION_MARKER, _decision),
)


def doclens_kind(system: str) -> str | None:
    """The DocLens prompt kind of a system message (its responder's name), or None.

    Args:
        system: The system message.
    """
    for marker, responder in _KINDS:
        if marker in system:
            return responder.__name__.lstrip("_")
    return None


def simulated_doclens_reply(texts: Sequence[str], seed: str) -> str | None:
    """A valid simulated reply to a DocLens conversation, or None for any other request.

    Args:
        texts: The conversation's message texts (system first, then the user's prompt; repair
            turns after them do not change the answer).
        seed: Request-independent part of the flip hash (mock model name, sample variation);
            the system message, which holds a panel member's stance, is added to it.
    """
    if len(texts) < 2:
        return None
    system, user = texts[0], texts[1]
    for marker, responder in _KINDS:
        if marker in system:
            return responder(f"{seed}\x1f{system}", system, user)
    return None


register_simulated_replies(simulated_doclens_reply)
