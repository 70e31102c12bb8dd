"""The ``magentic`` mode: a MagenticOne discussion among persona judges, chaired by an orchestrator.

One fresh :class:`MagenticOneGroupChat` per sample (no state can leak between samples or runs):
one ``AssistantAgent`` per persona (moderators too) and an orchestrator that chairs the panel,
marks the rounds and, after hearing every member, decides the final grades as the rubric JSON.

AutoGen 0.7.5 is pinned and its orchestrator is subclassed (private modules), because the
constructor offers no prompt hooks but the final-answer one. The subclass:

* speaks in our own words (SPEC §5): a system message for the chair on every orchestrator call,
  our own facts, agenda, briefing, progress-ledger and final-answer prompts;
* ``planning=False`` follows a fixed agenda: no facts/plan calls and no progress-ledger calls;
  members speak in persona order, round after round, then the chair decides. With 3 personas and
  1 round that is 4 calls instead of 9. A simulated (``mock/``) orchestrator always follows the
  fixed agenda, since it cannot write a progress ledger;
* counts *agent turns* itself: ``max_turns`` (default ``rounds * len(personas)``) is the real
  number of member turns (AutoGen's own check allows one more);
* reads the progress ledger forgivingly: fenced or wrapped JSON, bare values instead of
  ``{"reason", "answer"}``, string booleans (AutoGen counts ``"false"`` as true), missing minor
  keys; a ledger that still cannot be read is re-asked with the problem stated (at most 3 tries,
  AutoGen resends the identical prompt 10 times);
* never lets the ledger end the discussion before every member has spoken, keeps each round to one
  turn per member (a speaker who already spoke this round, or an unknown ``next_speaker``, is
  replaced by the next member due) and replans at most once on stalls;
* never uses ``output_content_type`` (StructuredMessage breaks MagenticOne in 0.7.5): members
  answer in text and their JSON is parsed with the rubric parser.

Any exception from the team (a ProviderFault after the run's retries, a ledger that cannot be
read, anything else) ends the sample as a failed verdict with a reason and the transcript so far.
A discussion that failed on its ledger is rerun once with a fresh team (the calls of both
attempts are recorded; both transcripts are kept, the second one marked ``attempt 2``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from dataclasses import dataclass
from typing import Any

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.messages import BaseChatMessage

from clinjudge.judges.clients import CallConfig, CallOutcome, provider_for
from clinjudge.judges.workflows._contract import ORCHESTRATOR_AGENT, WorkflowContext, WorkflowResult
from clinjudge.judges.workflows._magentic_chair import (
    AGENDA_MARKER,
    AUTOGEN_ORCHESTRATOR,
    BRIEFING_MARKER,
    DISCUSSION_ATTEMPTS,
    FACTS_MARKER,
    FINAL_MARKER,
    FINAL_PROMPT,
    LEDGER_MARKER,
    ORCHESTRATOR_MARKER,
    ORCHESTRATOR_SYSTEM,
    PERSONA_PANEL_NOTE,
    LedgerError,
    PanelGroupChat,
    PanelProtocol,
    shared_decision_schema,
    squash_name,
)
from clinjudge.judges.workflows._magentic_client import AgentClient
from clinjudge.judges.workflows._prm_evidence import item_evidence, prm_scorer
from clinjudge.judges.workflows._single import CallFn, SampleVerdict, judge_single_sample
from clinjudge.personas import Persona
from clinjudge.prm_bridge import PRM_VERIFIER_NAME, PRMEvidence, PRMVerifierAgent, evidence_text
from clinjudge.rubrics import (
    ChatTurn,
    JudgmentParseError,
    parse_judgment,
    render_evidence,
    render_system,
    render_user,
)

__all__ = [
    "AGENDA_MARKER",
    "BRIEFING_MARKER",
    "FACTS_MARKER",
    "FINAL_MARKER",
    "LEDGER_MARKER",
    "ORCHESTRATOR_AGENT",
    "ORCHESTRATOR_MARKER",
    "LedgerError",
    "magentic_workflow",
]

log = logging.getLogger(__name__)


# -- the workflow ---------------------------------------------------------------------------------


def _persona_system(persona: Persona, ctx: WorkflowContext) -> str:
    prm = ctx.config.prm is not None
    rubric = render_system(ctx.rubric, explanations=ctx.config.explanations, prm=prm)
    return f"{persona.system_message}\n\n{rubric}\n\n{PERSONA_PANEL_NOTE}"


def _with_persona(call: CallFn, persona: Persona) -> CallFn:
    """A call function that puts the persona's own instructions before the rubric."""

    async def persona_call(turns: list[ChatTurn], config: CallConfig) -> CallOutcome:
        if turns and turns[0].role == "system":
            system = ChatTurn("system", f"{persona.system_message}\n\n{turns[0].content}")
            turns = [system, *turns[1:]]
        return await call(turns, config)

    return persona_call


async def _blind_round(
    ctx: WorkflowContext, personas: list[Persona], evidence: PRMEvidence | None
) -> tuple[dict[str, SampleVerdict], list[tuple[str, ChatTurn]]]:
    """Each persona grades alone before the discussion (concurrently)."""
    report = None if evidence is None else evidence_text(evidence)
    results = await asyncio.gather(
        *(
            judge_single_sample(
                ctx.item,
                ctx.rubric,
                _with_persona(ctx.call_fn(p.name, "persona"), p),
                shots=ctx.shots,
                explanations=ctx.config.explanations,
                max_repairs=ctx.config.max_repairs,
                evidence=report,
            )
            for p in personas
        ),
        return_exceptions=True,
    )
    blind: dict[str, SampleVerdict] = {}
    for persona, result in zip(personas, results, strict=True):
        if isinstance(result, SampleVerdict):
            blind[persona.name] = result
        elif isinstance(result, Exception):
            error = f"blind round: {type(result).__name__}: {result}"[:500]
            blind[persona.name] = SampleVerdict("failed", error=error)
        else:  # a BaseException such as cancellation must not be swallowed
            raise result
    turns = [
        (name, ChatTurn(turn.role, f"[blind] {turn.content}"))
        for name, verdict in blind.items()
        for turn in verdict.transcript[2:]  # the rendered system and user prompts are standard
    ]
    return blind, turns


def _task_text(
    ctx: WorkflowContext,
    personas: list[Persona],
    rounds: int,
    blind: dict[str, SampleVerdict],
    evidence: PRMEvidence | None,
) -> str:
    names = ", ".join(p.name for p in personas)
    # Without a verifier agent the PRM's report travels with the document instead.
    report = None
    if evidence is not None and not _seats_verifier(ctx):
        report = evidence_text(evidence)
    parts = [
        render_user(ctx.item, ctx.rubric, ctx.shots, evidence=report),
        "PANEL PROTOCOL\n"
        f"The panel ({names}) discusses the summary in {rounds} round(s). In each round every "
        "member speaks once, argues for their grades with evidence from the notes, answers the "
        "other members' arguments and ends the reply with one JSON object holding a grade for "
        "every rubric key. The chair then decides the final grades; it does not average them.",
    ]
    independent = [
        f"- {name}: {json.dumps(v.values)}" for name, v in blind.items() if v.status == "ok"
    ]
    if independent:
        parts.append(
            "INDEPENDENT SCORES\nBefore the discussion each member graded the summary alone:\n"
            + "\n".join(independent)
        )
    return "\n\n".join(parts)


@dataclass
class _Discussion:
    messages: list[BaseChatMessage]
    completed: bool
    error: str | None = None
    retryable: bool = False


def _fault_reason(ctx: WorkflowContext, calls_before: int, exc: BaseException) -> tuple[str, bool]:
    """Why a discussion failed, and whether a fresh attempt is worth it."""
    new_calls = ctx.calls[calls_before:]
    if new_calls and new_calls[-1]["status"] != "ok":
        return f"provider: {new_calls[-1]['error']}", False
    text = f"{type(exc).__name__}: {exc}"
    first_line = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    ledger = isinstance(exc, LedgerError) or any(
        phrase in text for phrase in ("ledger", "Invalid next speaker", "LedgerError")
    )
    if ledger:
        found = re.search(r"(progress ledger unreadable[^\n]*|Failed to parse ledger[^\n]*)", text)
        return f"ledger: {found.group(1) if found else first_line}"[:500], True
    return f"discussion: {first_line}"[:500], False


def _seats_verifier(ctx: WorkflowContext) -> bool:
    return ctx.config.prm is not None and ctx.config.prm.verifier


async def _discuss(
    ctx: WorkflowContext,
    personas: list[Persona],
    task: str,
    protocol: PanelProtocol,
    evidence: PRMEvidence | None,
) -> _Discussion:
    agents: list[Any] = [
        AssistantAgent(
            p.name,
            model_client=AgentClient(ctx.chat(p.name, "persona")),
            description=p.description,
            system_message=_persona_system(p, ctx),
        )
        for p in personas
    ]
    if evidence is not None and protocol.verifier is not None:
        assert ctx.config.prm is not None
        agents.append(
            PRMVerifierAgent(
                prm_scorer(ctx.config.prm),
                ctx.item,
                name=protocol.verifier,
                evidence=evidence,
                # It quotes the summary: fenced like the document, never bare in the thread.
                render=lambda e: render_evidence(evidence_text(e), ctx.rubric),
            )
        )
    team = PanelGroupChat(
        agents,
        model_client=AgentClient(ctx.chat(ORCHESTRATOR_AGENT, "orchestrator")),
        max_turns=protocol.max_turns,
        max_stalls=ctx.config.max_stalls,
        final_answer_prompt=FINAL_PROMPT,
        protocol=protocol,
    )
    calls_before = len(ctx.calls)
    try:
        result = await team.run(task=task)
    except Exception as exc:  # noqa: BLE001 - any failure ends the sample, never the run
        reason, retryable = _fault_reason(ctx, calls_before, exc)
        log.info("magentic discussion failed: %s", reason)
        return _Discussion(list(protocol.seen), completed=False, error=reason, retryable=retryable)
    messages = list(protocol.seen) or [m for m in result.messages if isinstance(m, BaseChatMessage)]
    return _Discussion(messages, completed=True)


def _agent_of(source: str) -> str:
    return ORCHESTRATOR_AGENT if source == AUTOGEN_ORCHESTRATOR else source


def _transcript(
    discussion: _Discussion, names: list[str], attempt: int
) -> list[tuple[str, ChatTurn]]:
    """Every message as (agent, turn), labelled with its round."""
    turns: list[tuple[str, ChatTurn]] = []
    member_turns = 0
    n = len(names)
    final_index = len(discussion.messages) - 1 if discussion.completed else -1
    tag = f"attempt {attempt}, " if attempt > 1 else ""
    for index, message in enumerate(discussion.messages):
        text = message.to_model_text()
        agent = _agent_of(message.source)
        if message.source == "user":
            label = f"[{tag}task] " if tag else ""
            turns.append(("user", ChatTurn("user", label + text)))
            continue
        if agent == ORCHESTRATOR_AGENT and index == final_index:
            label = "final"
        elif agent == ORCHESTRATOR_AGENT and text.startswith(BRIEFING_MARKER):
            label = "briefing"
        elif agent != ORCHESTRATOR_AGENT and agent not in names:
            label = "evidence"  # the PRM verifier, heard before the members
        else:
            label = f"round {member_turns // n + 1}"
            if agent in names:
                member_turns += 1
        turns.append((agent, ChatTurn("assistant", f"[{tag}{label}] {text}")))
    return turns


def _member_verdicts(
    ctx: WorkflowContext,
    personas: list[Persona],
    messages: list[BaseChatMessage],
    blind: dict[str, SampleVerdict],
) -> dict[str, SampleVerdict]:
    """Each persona's last valid scores in the discussion (else its blind scores)."""
    members: dict[str, SampleVerdict] = {}
    for persona in personas:
        said = [m.to_model_text() for m in messages if m.source == persona.name]
        verdict: SampleVerdict | None = None
        problem = "it never spoke"
        for text in reversed(said):
            try:
                parsed = parse_judgment(text, ctx.rubric)
            except JudgmentParseError as exc:
                problem = str(exc)
                continue
            verdict = SampleVerdict.judged(parsed, [ChatTurn("assistant", text)])
            break
        if verdict is None and persona.name in blind and blind[persona.name].status == "ok":
            verdict = blind[persona.name]
        if verdict is None:
            verdict = SampleVerdict(
                "failed",
                error=f"no valid scores: {problem}"[:500],
                raw_text=said[-1] if said else None,
                transcript=[ChatTurn("assistant", t) for t in said],
            )
        members[persona.name] = verdict
    return members


def _final_verdict(ctx: WorkflowContext, discussion: _Discussion) -> SampleVerdict:
    orchestrator_texts = [
        m.to_model_text() for m in discussion.messages if m.source == AUTOGEN_ORCHESTRATOR
    ]
    if discussion.error is not None:
        return SampleVerdict(
            "failed",
            error=discussion.error,
            raw_text=orchestrator_texts[-1] if orchestrator_texts else None,
        )
    last = discussion.messages[-1] if discussion.messages else None
    if last is None or last.source != AUTOGEN_ORCHESTRATOR:
        return SampleVerdict(
            "failed",
            error="no final answer: the discussion ended without the orchestrator's decision",
            raw_text=last.to_model_text() if last is not None else None,
        )
    text = last.to_model_text()
    try:
        parsed = parse_judgment(text, ctx.rubric)
    except JudgmentParseError as exc:
        return SampleVerdict("failed", error=f"invalid final answer: {exc}"[:500], raw_text=text)
    return SampleVerdict.judged(parsed, [ChatTurn("assistant", text)])


def _simulated_orchestrator(ctx: WorkflowContext) -> bool:
    try:
        return provider_for(ctx.models.settings_for(ORCHESTRATOR_AGENT, "orchestrator")).simulated
    except ValueError:
        return False


async def magentic_workflow(ctx: WorkflowContext) -> WorkflowResult:
    """One MagenticOne discussion of one sample; never raises for model or ledger trouble.

    Args:
        ctx: The sample's context.
    """
    try:
        return await _magentic_workflow(ctx)
    except Exception as exc:  # noqa: BLE001 - a bug here must fail one sample, not the run
        log.exception("magentic workflow failed")
        error = f"discussion: {type(exc).__name__}: {exc}"[:500]
        return WorkflowResult(ORCHESTRATOR_AGENT, SampleVerdict("failed", error=error))


async def _magentic_workflow(ctx: WorkflowContext) -> WorkflowResult:
    config = ctx.config
    try:
        personas = ctx.personas  # resolved when the run was prepared, stored with it
    except Exception as exc:  # noqa: BLE001 - a bad persona spec fails the sample with its reason
        return WorkflowResult(
            ORCHESTRATOR_AGENT, SampleVerdict("failed", error=f"personas: {exc}"[:500])
        )
    if not personas:
        return WorkflowResult(
            ORCHESTRATOR_AGENT, SampleVerdict("failed", error="personas: none to seat")
        )
    names = [p.name for p in personas]
    aliases: dict[str, str] = {}
    for persona in personas:
        aliases[squash_name(persona.display_name)] = persona.name
        aliases[squash_name(persona.name)] = persona.name
    max_turns = config.max_turns or config.rounds * len(personas)
    rounds = -(-max_turns // len(personas))

    transcript: list[tuple[str, ChatTurn]] = []
    blind: dict[str, SampleVerdict] = {}
    evidence = await item_evidence(ctx)
    if config.blind_first_round:
        blind, blind_turns = await _blind_round(ctx, personas, evidence)
        transcript.extend(blind_turns)
    task = _task_text(ctx, personas, rounds, blind, evidence)
    rubric_text = render_system(
        ctx.rubric, explanations=config.explanations, prm=evidence is not None
    )
    # The simulated provider answers every prompt with rubric JSON, never a progress ledger:
    # a simulated orchestrator follows the fixed agenda.
    planning = config.planning and not _simulated_orchestrator(ctx)

    discussion = _Discussion([], completed=False, error="discussion: not started")
    all_messages: list[BaseChatMessage] = []
    for attempt in range(1, DISCUSSION_ATTEMPTS + 1):
        protocol = PanelProtocol(
            planning=planning,
            rounds=rounds,
            max_turns=max_turns,
            names=names,
            aliases=aliases,
            system=f"{ORCHESTRATOR_SYSTEM}\n\nTHE RUBRIC\n{rubric_text}",
            verifier=PRM_VERIFIER_NAME if evidence is not None and _seats_verifier(ctx) else None,
            decision=shared_decision_schema(ctx.rubric, explanations=config.explanations),
            decision_shared=True,
            decision_name=f"{ctx.rubric.name}_chair_decision",
        )
        discussion = await _discuss(ctx, personas, task, protocol, evidence)
        discussion_turns = _transcript(discussion, names, attempt)
        if attempt == 1 and transcript:
            # The task message comes first, before the blind round's replies.
            transcript = discussion_turns[:1] + transcript + discussion_turns[1:]
        else:
            transcript.extend(discussion_turns)
        all_messages.extend(discussion.messages)
        if discussion.error is None or not discussion.retryable:
            break
        log.info("magentic: rerunning the discussion once after: %s", discussion.error)

    verdict = _final_verdict(ctx, discussion)
    if verdict.status == "failed" and attempt > 1:
        verdict.error = f"{verdict.error} (after {attempt} attempts)"
    members = _member_verdicts(ctx, personas, all_messages, blind)
    return WorkflowResult(ORCHESTRATOR_AGENT, verdict, members=members, transcript=transcript)
