"""The PRM inside judge workflows: a shared model, an AutoGen tool and a verifier agent.

The model is loaded once per process (:func:`shared_scorer`) and shared by every item scored
concurrently; its forward passes run in a worker thread (``asyncio.to_thread``), so the event
loop and the other agents keep going. The tool returns a JSON string; the verifier agent needs
no LLM: asked anything, it answers with the PRM's step evidence for the item under judgment, so
it can sit in a ``magentic`` discussion (or its text can be handed to ``panel`` members).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Sequence
from typing import Annotated, Any

from autogen_agentchat.agents import BaseChatAgent
from autogen_agentchat.base import Response
from autogen_agentchat.messages import BaseChatMessage, TextMessage
from autogen_core import CancellationToken
from autogen_core.tools import FunctionTool
from pydantic import BaseModel, Field

from clinjudge.prm_bridge._aggregate import DEFAULT_THRESHOLD
from clinjudge.prm_bridge._backend import DEFAULT_BATCH_TOKENS, ChainScore, PRMScorer, StepScore
from clinjudge.prm_bridge._inputs import Segmenter, chain_from_text
from clinjudge.prm_bridge._presets import PRMFormat, make_format
from clinjudge.prm_bridge._rows import step_rows
from clinjudge.prm_bridge._segment import Chain
from clinjudge.rubrics import Item

PRM_TOOL_NAME = "prm_step_scores"
PRM_VERIFIER_NAME = "prm_verifier"
_TEXT_LIMIT = 160

_shared: dict[str, PRMScorer] = {}
_shared_lock = threading.Lock()


def shared_scorer(
    model: str,
    preset: str = "medprm",
    *,
    overrides: dict[str, Any] | None = None,
    device: str = "auto",
    dtype: str = "auto",
    attn: str = "auto",
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    prm_url: str | None = None,
    served_model: str | None = None,
) -> PRMScorer:
    """The process-wide scorer for these settings, loaded on first use.

    Args:
        model: Checkpoint directory or hub id (the tokenizer, when ``prm_url`` is set).
        preset: PRM format preset.
        overrides: Format fields to replace.
        device: ``auto``, ``cpu`` or ``cuda[:N]``.
        dtype: ``auto``, ``bfloat16``, ``float16`` or ``float32``.
        attn: Attention implementation.
        batch_tokens: Padded tokens per forward pass.
        prm_url: A vLLM pooling server to use instead of loading the model here.
        served_model: The model's name on that server.
    """
    key = json.dumps(
        [model, preset, overrides or {}, device, dtype, attn, batch_tokens, prm_url, served_model],
        sort_keys=True,
    )
    with _shared_lock:
        scorer = _shared.get(key)
        if scorer is None:
            fmt = make_format(preset, overrides)
            if prm_url:
                from clinjudge.prm_bridge._vllm import VLLMPRM

                scorer = VLLMPRM(
                    prm_url, fmt, tokenizer=model, served_model=served_model,
                    batch_tokens=batch_tokens,
                )  # fmt: skip
            else:
                from clinjudge.prm_bridge._scorer import TransformersPRM

                scorer = TransformersPRM(
                    model, fmt, device=device, dtype=dtype, attn=attn, batch_tokens=batch_tokens
                )
            _shared[key] = scorer
        return scorer


class PRMEvidence(BaseModel):
    """What the PRM says about one item's text.

    Args:
        item_id: The item.
        model: The PRM.
        format: The format preset name.
        threshold: Steps below it are flagged.
        steps: Every step's score.
        flagged: 1-based indices of flagged steps.
        aggregates: Candidate-level aggregates.
        warnings: Truncation and sanitising notes.
        error: Why the text could not be scored.
        n_tokens: Tokens in the model input.
    """

    item_id: str
    model: str
    format: str
    threshold: float
    steps: list[StepScore] = Field(default_factory=list)
    flagged: list[int] = Field(default_factory=list)
    aggregates: dict[str, float | None] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)
    error: str | None = None
    n_tokens: int = 0


def item_context(item: Item) -> tuple[str, list[str] | None]:
    """(question or dialogue, documents) the PRM reads before an item's summary.

    ``meta.question`` (or ``meta.dialogue``) wins; otherwise the source notes, in order.
    ``meta.documents`` are retrieved documents (Med-PRM); None when the item gives none.
    """
    meta = item.meta or {}
    question = meta.get("question") or meta.get("dialogue")
    if not isinstance(question, str):
        question = "\n\n".join(note.text for note in item.notes)
    documents = meta.get("documents")
    if documents is None:
        return question, None
    return question, [str(d) for d in documents] if isinstance(documents, list) else [
        str(documents)
    ]


def score_text(
    scorer: PRMScorer,
    item: Item,
    text: str | None = None,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    segmenter: Segmenter | None = None,
    section: str | None = None,
) -> PRMEvidence:
    """Score an item's summary (or ``text``) with the PRM (blocking).

    Args:
        scorer: The PRM.
        item: The item under judgment.
        text: Text to score instead of the summary.
        threshold: Steps below it are flagged.
        segmenter: Default: the format's.
        section: Part of the text scored (``all``, ``assessment_plan``, a heading); default:
            the format's. A text without it gets an error naming the headings found.
    """
    evidence = PRMEvidence(
        item_id=item.id, model=scorer.model_name, format=scorer.format.name, threshold=threshold
    )
    try:
        chain = item_chain(item, scorer.format, text, segmenter=segmenter, section=section)
    except ValueError as exc:
        evidence.error = str(exc)
        return evidence
    [result] = scorer.score([chain], threshold)
    return with_result(evidence, result)


def item_chain(
    item: Item,
    fmt: PRMFormat,
    text: str | None = None,
    *,
    segmenter: Segmenter | None = None,
    section: str | None = None,
) -> Chain:
    """The chain the PRM scores for an item's summary (or ``text``).

    Args:
        item: The item under judgment.
        fmt: The PRM format (its segmenter and section are the defaults).
        text: Text to score instead of the summary.
        segmenter: Default: the format's.
        section: Part of the text scored; default: the format's.

    Raises:
        ValueError: The text has no step to score (or lacks the section).
    """
    question, documents = item_context(item)
    return chain_from_text(
        item.id,
        text or item.summary,
        segmenter or fmt.segmenter,
        question=question,
        documents=documents,
        section=section or fmt.section,
    )


def with_result(evidence: PRMEvidence, result: ChainScore) -> PRMEvidence:
    """The evidence with a chain's scores filled in (in place; returned for chaining)."""
    evidence.steps = result.steps
    evidence.flagged = [s.index for s in result.flagged_steps]
    evidence.aggregates = result.aggregates
    evidence.warnings = result.warnings
    evidence.error = result.error
    evidence.n_tokens = result.n_tokens
    return evidence


async def score_item(
    scorer: PRMScorer,
    item: Item,
    text: str | None = None,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    segmenter: Segmenter | None = None,
    section: str | None = None,
) -> PRMEvidence:
    """:func:`score_text` in a worker thread, off the event loop."""
    return await asyncio.to_thread(
        score_text,
        scorer,
        item,
        text,
        threshold=threshold,
        segmenter=segmenter,
        section=section,
    )


def evidence_rows(
    run_id: str, evidence: PRMEvidence, candidate: str = "summary"
) -> list[dict[str, Any]]:
    """``prm_steps`` rows of an item's evidence (for a workflow's ``extra_rows``).

    The PRM is deterministic, so every sample of an item yields the same rows; the table's key
    (run, item, candidate, step) keeps one copy.
    """
    return step_rows(run_id, evidence.item_id, candidate, evidence.steps, evidence.model)


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _TEXT_LIMIT else text[: _TEXT_LIMIT - 3] + "..."


def evidence_text(evidence: PRMEvidence) -> str:
    """The evidence as a short report for judges to read (no JSON, so no rubric parser sees it)."""
    head = (
        f"Process reward model check of item {evidence.item_id} "
        f"({evidence.model}, {evidence.format})."
    )
    if evidence.error:
        return f"{head}\nThe text could not be scored: {evidence.error}"
    scored = [s for s in evidence.steps if s.score is not None]
    lines = [
        head,
        "Each step was given the model's probability that it is correct; steps scoring below "
        f"{evidence.threshold:.2f} are flagged. This is automated evidence from a trained "
        "verifier, not a grade: check it against the source notes.",
    ]
    agg = evidence.aggregates
    if agg.get("min") is not None:
        lines.append(
            f"Lowest step {agg['min']:.3f}; mean {agg['mean']:.3f}; "
            f"log-product {agg['product']:.3f}; "
            f"{len(evidence.flagged)} of {len(scored)} steps flagged."
        )
    flagged = [s for s in evidence.steps if s.flagged]
    if flagged:
        lines.append("Flagged steps:")
        for step in flagged:
            what = f'"{_short(step.text)}"' if step.text else f"({step.kind.replace('_', ' ')})"
            lines.append(f"- step {step.index} [{step.kind}] {step.score:.3f}: {what}")
    lines.append(
        "All steps: "
        + ", ".join(
            f"{s.index}={'cut' if s.score is None else f'{s.score:.2f}'}" for s in evidence.steps
        )
    )
    lines.extend(f"Note: {w}" for w in evidence.warnings)
    return "\n".join(lines)


def make_prm_tool(
    scorer: PRMScorer,
    item: Item,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    segmenter: Segmenter | None = None,
    name: str = PRM_TOOL_NAME,
    section: str | None = None,
) -> FunctionTool:
    """An async AutoGen tool returning the PRM's step scores for the item under judgment.

    Args:
        scorer: The (shared) PRM.
        item: The item under judgment.
        threshold: Steps below it are flagged.
        segmenter: Default: the format's.
        name: Tool name.
        section: Part of the text scored; default: the format's.
    """
    cache: dict[str, str] = {}

    async def prm_step_scores(
        text: Annotated[
            str, "Text to score instead of the summary under judgment; leave empty for the summary"
        ] = "",
    ) -> str:
        if text not in cache:
            evidence = await score_item(
                scorer,
                item,
                text or None,
                threshold=threshold,
                segmenter=segmenter,
                section=section,
            )
            cache[text] = evidence.model_dump_json()
        return cache[text]

    return FunctionTool(
        prm_step_scores,
        name=name,
        description=(
            "Score every step of the clinical text under judgment with a process reward model. "
            "Returns JSON: each step's probability of being correct, the flagged steps (below "
            f"{threshold}) and candidate-level aggregates."
        ),
    )


class PRMVerifierAgent(BaseChatAgent):
    """A discussion member without an LLM: it reports the PRM's step evidence for the item.

    Args:
        scorer: The (shared) PRM.
        item: The item under judgment.
        name: Agent name.
        threshold: Steps below it are flagged.
        segmenter: Default: the format's.
        description: How the chair sees this member.
        evidence: The item's evidence when it was already scored (it is then not scored again).
        render: Turns the evidence into the message text (e.g. fenced for a judge prompt).
        section: Part of the text scored; default: the format's.
    """

    def __init__(
        self,
        scorer: PRMScorer,
        item: Item,
        *,
        name: str = PRM_VERIFIER_NAME,
        threshold: float = DEFAULT_THRESHOLD,
        segmenter: Segmenter | None = None,
        description: str | None = None,
        evidence: PRMEvidence | None = None,
        render: Callable[[PRMEvidence], str] = evidence_text,
        section: str | None = None,
    ):
        super().__init__(
            name,
            description
            or "A process reward model that scores each step of the summary for correctness "
            "and points out the steps it doubts. It does not grade the rubric.",
        )
        self._scorer = scorer
        self._item = item
        self._threshold = threshold
        self._segmenter = segmenter
        self._section = section
        self._evidence: PRMEvidence | None = evidence
        self._render = render

    @property
    def produced_message_types(self) -> Sequence[type[BaseChatMessage]]:
        return (TextMessage,)

    async def evidence(self) -> PRMEvidence:
        """The item's evidence (scored once, then reused)."""
        if self._evidence is None:
            self._evidence = await score_item(
                self._scorer,
                self._item,
                threshold=self._threshold,
                segmenter=self._segmenter,
                section=self._section,
            )
        return self._evidence

    async def on_messages(
        self, messages: Sequence[BaseChatMessage], cancellation_token: CancellationToken
    ) -> Response:
        evidence = await self.evidence()
        return Response(chat_message=TextMessage(content=self._render(evidence), source=self.name))

    async def on_reset(self, cancellation_token: CancellationToken) -> None:
        """Nothing to forget: the evidence belongs to the item, not to the conversation."""
