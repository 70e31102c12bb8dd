"""A DocLens-aware responder for the fake OpenAI server, with rules simple enough to compute
expected metrics by hand.

- extraction: the claims of a text are its sentences (split at ". "), without the final stop;
- claim entailment: a claim is entailed iff it equals (case-insensitively, punctuation aside) one
  of the document's sentences;
- citation: a statement is entailed iff every content word (4+ letters) of it occurs in the
  cited units; a cited unit supports it when it holds at least one of those words;
- personas (panel, magentic): ``low_scorer`` always answers 0, the others follow the rules;
- discussion turns repeat the member's rule verdict; the orchestrator's decisions come from
  ``orchestrator_verdicts`` (id -> 0/1), defaulting to the rule.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from clinjudge.judges.doclens._prompts import (
    BATCH_MARKER,
    CITATION_MARKER,
    DECISION_MARKER,
    DISCUSSION_MARKER,
    SINGLE_MARKER,
)
from clinjudge.judges.doclens._prompts import EXTRACTION_MARKER as EXTRACT_MARKER
from clinjudge.rubrics import Item


def _block(text: str, tag: str) -> str:
    match = re.search(rf"<{tag}>\n(.*?)\n</{tag}>", text, re.DOTALL)
    assert match, f"no {tag} block"
    return match.group(1)


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9 ]", " ", text.lower()).split())


def sentences(text: str) -> list[str]:
    """The fake extractor's claims: sentences without their final stop."""
    parts = re.split(r"(?<=[.!?])\s+", " ".join(text.split()))
    return [p.rstrip(".!? ") for p in parts if p.strip(".!? ")]


def claim_entailed(document: str, claim: str) -> bool:
    """The fake judge's claim rule."""
    return _norm(claim) in {_norm(s) for s in sentences(document)}


def content_words(text: str) -> set[str]:
    """Words of 4+ letters."""
    return {w for w in _norm(text).split() if len(w) >= 4}


def citation_verdict(statement: str, units: dict[int, str]) -> tuple[bool, list[int]]:
    """The fake judge's citation rule: (entailed, supporting units)."""
    words = content_words(statement)
    pooled = set().union(*(content_words(t) for t in units.values())) if units else set()
    supporting = [n for n, t in units.items() if words & content_words(t)]
    return words <= pooled, supporting


def _persona(system: str) -> str | None:
    for name in ("High Scorer", "Low Scorer", "Middle Scorer"):
        if system.startswith(f"You are {name}"):
            return name.lower().replace(" ", "_")
    return None


def _units(text: str) -> dict[int, str]:
    units = {}
    for line in _block(text, "SOURCE_UNITS").splitlines():
        match = re.match(r"\[(\d+)\] (.*)", line)
        if match:
            units[int(match.group(1))] = match.group(2)
    return units


def make_responder(
    orchestrator_verdicts: dict[str, int] | None = None,
    broken: Callable[[dict[str, Any]], str | None] | None = None,
) -> Callable[[dict[str, Any]], str]:
    """A responder for :class:`tests.fake_openai.FakeOpenAIServer`.

    Args:
        orchestrator_verdicts: The orchestrator's decision per disputed id.
        broken: Optional override: returns a reply text for requests it wants to break.
    """

    def respond(body: dict[str, Any]) -> str:
        if broken is not None:
            override = broken(body)
            if override is not None:
                return override
        messages = body["messages"]
        system = messages[0]["content"]
        user = next(m["content"] for m in messages if m["role"] == "user")
        naysayer = _persona(system) == "low_scorer"
        if EXTRACT_MARKER in system:
            return json.dumps({"claims": sentences(_block(user, "TEXT"))})
        if BATCH_MARKER in system:
            document = _block(user, "DOCUMENT")
            claims = [re.sub(r"^\d+\. ", "", line) for line in _block(user, "CLAIMS").splitlines()]
            return json.dumps(
                [
                    {
                        "id": n,
                        "claim": c,
                        "explanation": "fake rule",
                        "entailed": 0 if naysayer else int(claim_entailed(document, c)),
                    }
                    for n, c in enumerate(claims, start=1)
                ]
            )
        if SINGLE_MARKER in system:
            verdict = claim_entailed(_block(user, "DOCUMENT"), _block(user, "CLAIMS"))
            entailed = 0 if naysayer else int(verdict)
            return json.dumps({"explanation": "fake rule", "entailed": entailed})
        if CITATION_MARKER in system:
            entailed, supporting = citation_verdict(_block(user, "STATEMENT"), _units(user))
            return json.dumps(
                {
                    "explanation": "fake rule",
                    "supporting": supporting,
                    "entailed": 0 if naysayer else int(entailed),
                }
            )
        if DISCUSSION_MARKER in system:
            disputes = json.loads(_block(user, "VERDICTS"))
            return json.dumps(
                [
                    {
                        "id": d["id"],
                        "explanation": "I keep my vote",
                        "entailed": 0 if naysayer else 1,
                    }
                    for d in disputes
                ]
            )
        if DECISION_MARKER in system:
            disputes = json.loads(_block(user, "DISCUSSION"))
            chosen = orchestrator_verdicts or {}
            return json.dumps(
                [
                    {
                        "id": d["id"],
                        "explanation": "decided",
                        "supporting": [int(n) for n in d.get("cited_units", {})][:1],
                        "entailed": chosen.get(d["id"], 1),
                    }
                    for d in disputes
                ]
            )
        raise AssertionError(f"unexpected request: {system[:80]!r}")

    return respond


# Two hand-checked items (used by the orchestration, report and NLI tests).
ITEMS = [
    Item(
        id="a",
        notes=[
            "[doctor] what brings you in today\n"
            "[patient] i have had a cough for three days\n"
            "[patient] no fever at all\n"
            "[doctor] any chest pain\n"
            "[patient] no chest pain"
        ],
        reference=(
            "The patient has had a cough for three days. The patient has no fever. "
            "The patient has no chest pain."
        ),
        summary=(
            "The patient has had a cough for three days [1]. The patient has no fever [2][3]. "
            "The patient has a headache [0]."
        ),
        meta={"section": "subjective"},
    ),
    Item(
        id="b",
        notes=[
            "[doctor] start amoxicillin twice daily\n[patient] okay\n[doctor] return in two weeks"
        ],
        reference="Start amoxicillin twice daily. Return in two weeks.",
        summary=(
            "Start amoxicillin twice daily. Return in two weeks [2]. Follow up with cardiology [7]."
        ),
        meta={"section": "assessment_and_plan"},
    ),
]

# Item a: reference claims {cough, no fever, no chest pain}, output claims {cough, no fever,
# headache}: recall 2/3, precision 2/3. Statements: cough [1] entailed (1 of 1 citation
# counts); no fever [2][3] entailed, only [2] supports it (1 of 2 counts); headache [0] not
# entailed (0 of 1): citation recall 2/3, precision 2/4.
# Item b: recall 2/2, precision 2/3. "Start amoxicillin" has no citation and borrows [2] from
# the next sentence, which does not support it; "Return in two weeks [2]" is entailed;
# "[7]" names no source unit: citation recall 1/3, precision 1/3.
EXPECTED = {
    "a": {
        "claim_recall": 2 / 3,
        "claim_precision": 2 / 3,
        "citation_recall": 2 / 3,
        "citation_precision": 2 / 4,
    },
    "b": {
        "claim_recall": 1.0,
        "claim_precision": 2 / 3,
        "citation_recall": 1 / 3,
        "citation_precision": 1 / 3,
    },
}
