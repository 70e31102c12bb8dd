"""A FakeOpenAIServer responder that plays a MagenticOne panel: orchestrator and personas.

Requests are routed by their text, the way a real model would see them:

* the orchestrator's requests carry its system message (``ORCHESTRATOR_MARKER``); the last
  message says which prompt it is: facts, agenda, progress ledger ("Please output an answer in
  pure JSON format") or final answer. AutoGen's stock phrases are recognised too;
* a persona's requests carry that persona's system message; it answers with a short argument
  and valid PDSQI-9 JSON, a different score per persona.

The ledger is realistic: it counts which personas have spoken (their replies start with
``As <name>,``), picks the next one round-robin and says the request is satisfied once every
persona has spoken ``satisfied_after`` times. Switches reproduce AutoGen 0.7.5 troubles: garbage
or fenced ledgers, string booleans, unknown speaker names, a final answer without JSON.

Every reply is also recorded with the token usage the fake server reports for it, so tests can
compare the calls table with what the provider billed.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from clinjudge.judges.workflows._magentic import (
    AGENDA_MARKER,
    FACTS_MARKER,
    FINAL_MARKER,
    LEDGER_MARKER,
    ORCHESTRATOR_MARKER,
)
from clinjudge.personas import Persona, load_personas
from tests.fake_openai import LIKERT_KEYS, _message_text

ORCHESTRATOR = "orchestrator"


def panel_scores(score: int, who: str) -> dict[str, Any]:
    """Valid PDSQI-9 scores: ``score`` on every Likert key, gate-consistent binaries."""
    scores: dict[str, Any] = {key: score for key in LIKERT_KEYS}
    scores.update(abstraction=1, synthesized=score, voice_summ=0, voice_note=0)
    scores["rationale"] = f"{who} grades every Likert attribute {score}."
    return scores


@dataclass
class Served:
    """One answered request: who asked, what kind of prompt, and the usage the server reports."""

    agent: str
    kind: str
    model: str
    prompt_tokens: int
    completion_tokens: int


@dataclass
class PanelFake:
    """Responder for :class:`tests.fake_openai.FakeOpenAIServer` (pass it as ``responder``).

    Args:
        personas: Persona spec (as ``RunConfig.personas``).
        scores: Score per persona name (default: 5, 2, 3, 4, ... in persona order).
        final_scores: Score the orchestrator decides (default 3).
        satisfied_after: Turns per persona before the ledger says satisfied.
        ledger: ``ok``, ``garbage`` (never JSON), ``garbage_once`` (first ledger call only),
            ``fenced`` (```json fences and prose), ``string_bools`` (answers as "true"/"false"),
            ``unknown_speaker`` (a name that is no participant), ``repeat_speaker`` (always the
            first persona), ``stalled`` (no progress), ``bare`` (no reason/answer).
        final: ``ok`` or ``no_json``.
    """

    personas: str = "high_scorer,low_scorer"
    scores: dict[str, int] = field(default_factory=dict)
    final_scores: int = 3
    satisfied_after: int = 1
    ledger: str = "ok"
    final: str = "ok"
    served: list[Served] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.members: list[Persona] = load_personas(self.personas)
        defaults = [5, 2, 3, 4, 1]
        for index, persona in enumerate(self.members):
            self.scores.setdefault(persona.name, defaults[index % len(defaults)])
        self._ledger_calls = 0
        self._lock = threading.Lock()

    # -- routing ------------------------------------------------------------------------------

    def __call__(self, body: dict[str, Any]) -> str:
        messages = body.get("messages") or []
        system = _message_text(messages[0]) if messages and messages[0]["role"] == "system" else ""
        last = _message_text(messages[-1]) if messages else ""
        if ORCHESTRATOR_MARKER in system or "pre-survey" in last:
            agent, kind, content = ORCHESTRATOR, *self._orchestrator(messages, last)
        else:
            agent = next((p.name for p in self.members if p.system_message in system), "unknown")
            kind = "persona"
            content = self._persona(agent)
        prompt_tokens = max(sum(len(_message_text(m).split()) for m in messages), 1)
        with self._lock:
            self.served.append(
                Served(
                    agent,
                    kind,
                    str(body.get("model")),
                    prompt_tokens,
                    max(len(content.split()), 1),
                )
            )
        return content

    def _orchestrator(self, messages: Sequence[dict[str, Any]], last: str) -> tuple[str, str]:
        if FACTS_MARKER in last or "Here is the pre-survey" in last:
            return "facts", "1. The rubric has 11 attributes.\n2. Check the citations first."
        if AGENDA_MARKER in last or "bullet-point plan" in last:
            return "plan", "- Round 1: each member grades.\n- Chair decides."
        if "has stalled" in last:
            return "facts_update", "Agreed: citations. Disputed: accuracy."
        if "new short bullet-point agenda" in last:
            return "plan_update", "- Ask each member about accuracy."
        if LEDGER_MARKER in last:
            return "ledger", self._ledger_reply(messages)
        if FINAL_MARKER in last or "We have completed the task" in last:
            if self.final == "no_json":
                return "final", "The panel agreed the summary is adequate overall."
            scores = panel_scores(self.final_scores, ORCHESTRATOR)
            return "final", "Weighing the arguments:\n" + json.dumps(scores)
        return "other", "Noted."

    def _persona(self, name: str) -> str:
        scores = panel_scores(self.scores.get(name, 3), name)
        return f"As {name}, I argue from the notes.\n{json.dumps(scores)}"

    def spoken(self, messages: Sequence[dict[str, Any]]) -> list[str]:
        """Persona replies visible in a request, in order."""
        said = []
        for message in messages:
            text = _message_text(message)
            for persona in self.members:
                if message.get("role") == "user" and text.startswith(f"As {persona.name},"):
                    said.append(persona.name)
        return said

    def _ledger_reply(self, messages: Sequence[dict[str, Any]]) -> str:
        with self._lock:
            self._ledger_calls += 1
            call = self._ledger_calls
        if self.ledger == "garbage" or (self.ledger == "garbage_once" and call == 1):
            return "I think the next speaker should be the low scorer."
        said = self.spoken(messages)
        names = [p.name for p in self.members]
        counts = {n: said.count(n) for n in names}
        done = min(counts.values()) >= self.satisfied_after
        nxt = min(names, key=lambda n: (counts[n], names.index(n)))
        if self.ledger == "unknown_speaker":
            nxt = "Dr. Nobody"
        if self.ledger == "repeat_speaker":
            nxt = names[0]
        answers: dict[str, Any] = {
            "is_request_satisfied": done,
            "is_in_loop": False,
            "is_progress_being_made": self.ledger != "stalled",
            "next_speaker": nxt,
            "instruction_or_question": f"{nxt}, please grade the summary and end with the JSON.",
        }
        if self.ledger == "string_bools":
            answers = {
                k: (str(v).lower() if isinstance(v, bool) else v) for k, v in answers.items()
            }
        if self.ledger == "bare":
            return json.dumps(answers)
        ledger = {k: {"reason": "fake", "answer": v} for k, v in answers.items()}
        text = json.dumps(ledger, indent=1)
        if self.ledger == "fenced":
            return f"Here is the ledger:\n```json\n{text}\n```"
        return text

    # -- accounting -----------------------------------------------------------------------------

    def usage_by_agent(self) -> dict[str, tuple[int, int]]:
        """(prompt, completion) tokens the server reported, summed per agent."""
        totals: dict[str, tuple[int, int]] = {}
        for s in self.served:
            p, c = totals.get(s.agent, (0, 0))
            totals[s.agent] = (p + s.prompt_tokens, c + s.completion_tokens)
        return totals

    def count(self, agent: str | None = None, kind: str | None = None) -> int:
        """Requests answered, optionally for one agent and/or prompt kind."""
        return sum(
            1
            for s in self.served
            if (agent is None or s.agent == agent) and (kind is None or s.kind == kind)
        )
