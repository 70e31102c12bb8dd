"""Render a chain in a PRM format and find the token position of every step's score.

The rendered text is built piece by piece, so the character span of each step marker is known
exactly; after tokenization the score position is the token holding the marker's last character
(shifted by the format's ``read_offset``). Nothing depends on searching the token ids for the tag,
so a tag that also occurs in user text, or a tag the tokenizer merges with its neighbours, cannot
shift the scores. Inputs longer than the limit are cut by the format's truncation policy, and
every cut is reported as a warning on the result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from clinjudge.errors import UserError
from clinjudge.prm_bridge._presets import PRMFormat
from clinjudge.prm_bridge._segment import Chain, Step

CONTEXT_CUT_MARK = "..."


class PRMInputError(UserError):
    """A chain cannot be rendered or does not fit (names the id and candidate)."""


@dataclass
class Rendered:
    """A rendered chain: the text, each step marker's character span, documents kept."""

    text: str
    spans: list[tuple[int, int]]
    documents_kept: int


@dataclass
class Encoded:
    """A tokenized chain ready for the model.

    Args:
        input_ids: Token ids (already truncated).
        positions: Score position of each step; None for steps cut by truncation.
        warnings: What was changed to make the chain fit, or removed from its text.
    """

    input_ids: list[int]
    positions: list[int | None]
    warnings: list[str] = field(default_factory=list)

    @property
    def truncated(self) -> bool:
        """Whether anything was cut."""
        return any(w.startswith("truncated") for w in self.warnings)


def _label(chain: Chain) -> str:
    return f"{chain.id}/{chain.candidate}"


def reserved_strings(fmt: PRMFormat) -> list[str]:
    """Marker and special strings that must not appear inside user text."""
    found = {s for s in (*fmt.special_tokens, *fmt.kind_tokens.values(), fmt.placeholder) if s}
    return sorted(found, key=len, reverse=True)


def sanitise(text: str, reserved: list[str], where: str, warnings: list[str]) -> str:
    """Remove reserved marker strings from user text (each removal is reported)."""
    for token in reserved:
        if token in text:
            count = text.count(token)
            text = text.replace(token, " " if token.startswith(" ") else "")
            warnings.append(f"removed {count} x {token!r} from {where}")
    return text


def _step_body(fmt: PRMFormat, step: Step, n: int, reserved: list[str], warnings: list[str]):
    """One step's text before its marker: as prepared (``raw``) or rebuilt by ``step_format``."""
    if step.raw is not None:
        return sanitise(step.raw, reserved, f"step {n}", warnings).strip()
    text = sanitise(step.text, reserved, f"step {n}", warnings).strip()
    if fmt.newlines_to_spaces:
        text = text.replace("\n", " ")
    return fmt.step_format.format(n=n, text=text) if text or step.kind == "step" else ""


def _solution(
    fmt: PRMFormat, chain: Chain, warnings: list[str]
) -> tuple[str, list[tuple[int, int]]]:
    reserved = reserved_strings(fmt)
    pieces: list[str] = []
    spans: list[tuple[int, int]] = []
    length = 0
    if chain.preamble:
        pre = sanitise(chain.preamble, reserved, "preamble", warnings)
        pieces.append(pre.replace("\n", " ") if fmt.newlines_to_spaces else pre)
        length = len(pieces[0])
    for n, step in enumerate(chain.steps, start=1):
        body = _step_body(fmt, step, n, reserved, warnings)
        if pieces:
            # A preamble needs a separator even where steps are glued together (PRM-Clinic).
            glue = fmt.joiner or ("\n" if n == 1 else "")
            pieces.append(glue)
            length += len(glue)
        marker = fmt.marker(step.kind)
        start = length + len(body)
        spans.append((start, start + len(marker)))
        pieces.append(body + marker)
        length += len(body) + len(marker)
    return "".join(pieces), spans


def render(
    fmt: PRMFormat,
    chain: Chain,
    tokenizer: Any,
    *,
    question: str | None = None,
    documents: list[str] | None = None,
) -> tuple[Rendered, list[str]]:
    """Render a chain as the model's input text.

    Args:
        fmt: The PRM format.
        chain: The chain.
        tokenizer: A Hugging Face tokenizer (chat formats use its chat template).
        question: Replaces the chain's question (truncation passes a shortened one).
        documents: Replaces the chain's documents (already cut to the budget).

    Returns:
        The rendered chain and warnings about removed marker strings.
    """
    warnings: list[str] = []
    reserved = reserved_strings(fmt)
    question = chain.question if question is None else question
    question = sanitise(question, reserved, "question", warnings)
    docs = chain.documents if documents is None else documents
    docs = [sanitise(d, reserved, f"document {i}", warnings) for i, d in enumerate(docs, 1)]
    doc_block = "".join(fmt.document_format.format(n=i, text=d) for i, d in enumerate(docs, 1))
    solution, spans = _solution(fmt, chain, warnings)
    head_tmpl, _, tail_tmpl = fmt.prompt.partition("{solution}")
    values = {"documents": doc_block, "question": question}
    head, tail = head_tmpl.format(**values), tail_tmpl.format(**values)
    content = head + solution + tail
    base = len(head)
    if fmt.template == "chat":
        text, offset = _chat(fmt, tokenizer, content, chain.grounded, _label(chain))
        base += offset
    else:
        text = content
    shifted = [(base + s, base + e) for s, e in spans]
    return Rendered(text=text, spans=shifted, documents_kept=len(docs)), warnings


def _chat(fmt: PRMFormat, tokenizer: Any, content: str, grounded: bool, label: str):
    # The system prompt follows the mode (documents given), not what survived the budget:
    # Med-PRM picks its RAG prompt for the whole run, even for an empty document block.
    if not getattr(tokenizer, "chat_template", None):
        raise PRMInputError(
            f"{label}: format {fmt.name!r} uses a chat template but the tokenizer has none; "
            "use a checkpoint with a chat template or the format override template=raw"
        )
    system = fmt.system_prompt_documents if grounded and fmt.system_prompt_documents else None
    system = system if system is not None else fmt.system_prompt
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": content}
    ]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    offset = text.rfind(content)
    if offset < 0:
        raise PRMInputError(f"{label}: the chat template changed the user text; cannot find steps")
    return text, offset


def keep_documents(docs: list[str], tokenizer: Any, budget: int | None) -> list[str]:
    """Whole documents, in order, while their tokens (+1 each) fit the budget (Med-PRM's rule)."""
    if budget is None:
        return list(docs)
    kept, used = [], 0
    for doc in docs:
        cost = len(tokenizer(doc, add_special_tokens=False)["input_ids"]) + 1
        if used + cost > budget:
            break
        kept.append(doc)
        used += cost
    return kept


def _tokenize(fmt: PRMFormat, tokenizer: Any, rendered: Rendered, label: str):
    enc = tokenizer(
        rendered.text,
        add_special_tokens=fmt.add_special_tokens,
        return_offsets_mapping=True,
    )
    ids = list(enc["input_ids"])
    positions: list[int] = []
    for n, (start, end) in enumerate(rendered.spans, start=1):
        token = None
        for char in range(end - 1, start - 1, -1):  # the last marker character held by a token
            token = enc.char_to_token(char)
            if token is not None:
                break
        if token is None:
            raise PRMInputError(f"{label}: step {n}: its marker maps to no token")
        position = token + fmt.read_offset
        if position < 0:
            raise PRMInputError(f"{label}: step {n}: score position before the input start")
        positions.append(position)
    return ids, positions


def _cut_question(question: str, tokenizer: Any, drop: int) -> str:
    """The question without its first ``drop`` tokens (cut on the original characters)."""
    body = question.removeprefix(CONTEXT_CUT_MARK)
    offsets = tokenizer(body, add_special_tokens=False, return_offsets_mapping=True)[
        "offset_mapping"
    ]
    if drop >= len(offsets):
        return ""
    return CONTEXT_CUT_MARK + body[offsets[drop][0] :]


def encode(fmt: PRMFormat, tokenizer: Any, chain: Chain, max_length: int | None = None) -> Encoded:
    """Render and tokenize a chain, applying the document budget and the truncation policy.

    Args:
        fmt: The PRM format.
        tokenizer: A fast Hugging Face tokenizer.
        chain: The chain.
        max_length: Token limit (the format's own ``max_length`` wins when set).

    Raises:
        PRMInputError: The chain cannot be rendered, or is too long under ``truncation=error``.
    """
    label = _label(chain)
    limit = fmt.max_length or max_length
    docs = keep_documents(chain.documents, tokenizer, fmt.document_budget)
    warnings: list[str] = []
    if len(docs) < len(chain.documents):
        warnings.append(
            f"kept {len(docs)} of {len(chain.documents)} documents "
            f"(budget {fmt.document_budget} tokens)"
        )
    question = chain.question
    rendered, notes = render(fmt, chain, tokenizer, question=question, documents=docs)
    ids, positions = _tokenize(fmt, tokenizer, rendered, label)
    original = len(ids)
    while limit is not None and len(ids) > limit and fmt.truncation == "context":
        over = len(ids) - limit + len(CONTEXT_CUT_MARK)
        if docs:
            docs = docs[:-1]
        elif question:
            question = _cut_question(question, tokenizer, over + 4)
        else:
            break
        rendered, notes = render(fmt, chain, tokenizer, question=question, documents=docs)
        ids, positions = _tokenize(fmt, tokenizer, rendered, label)
    warnings.extend(notes)
    if limit is None or len(ids) <= limit:
        if len(ids) < original:
            warnings.append(
                f"truncated context: {original} -> {len(ids)} tokens (limit {limit}); "
                f"{len(docs)} documents kept, question "
                f"{'cut from its start' if question != chain.question else 'kept'}"
            )
        return Encoded(ids, list(positions), warnings)
    if fmt.truncation == "error":
        raise PRMInputError(
            f"{label}: {len(ids)} tokens exceed the limit of {limit} (truncation=error)"
        )
    kept: list[int | None] = [p if p < limit else None for p in positions]
    dropped = sum(p is None for p in kept)
    warnings.append(
        f"truncated steps: {original} -> {limit} tokens; the last {dropped} of {len(kept)} "
        "steps are unscored"
    )
    return Encoded(ids[:limit], kept, warnings)
