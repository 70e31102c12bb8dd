"""Settings of a DocLens run (``doclens:`` section of the run config)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

UncitedPolicy = Literal["borrow_next", "zero"]
SourceUnits = Literal["auto", "markers", "lines", "notes"]
Compat = Literal["clinjudge", "official"]


class DocLensSettings(BaseModel):
    """How DocLens claims and citations are extracted and judged.

    Args:
        min_claims: Fewest claims asked for per text (a non-empty text yielding fewer is invalid).
        max_claims: Most claims asked for per text; extra claims in a reply are dropped.
        citation_base: Number of the first source unit: 0 as in DocLens, 1 as in ALCE.
        uncited: What an output statement without citations gets: ``borrow_next`` takes the
            citations of the next cited statement (DocLens), ``zero`` scores it as unsupported
            (ALCE).
        max_citations: Citations kept per statement, in the order written (10 in DocLens, 3 in
            ALCE); the rest are ignored.
        source_units: How the source notes become numbered units: ``markers`` reads the
            ``[n]`` prefixes already in the text, ``lines`` numbers non-empty lines (dialogue
            turns) across all notes, ``notes`` numbers whole notes, ``auto`` picks ``markers``
            when the first note starts with a marker, else ``lines``.
        citations: Judge citations (citation recall and precision).
        batch_entailment: One call per text with all claims (falling back to one call per
            claim for claims the reply misses); off means one call per claim from the start.
        nli_model: Hugging Face sequence-classification NLI checkpoint (path or hub id) that
            replaces the LLM for entailment; claims are still extracted by the LLM.
        nli_device: Torch device for the NLI model.
        nli_threshold: Entailment probability at or above which a hypothesis counts as entailed.
        nli_truncate_words: Keep only the first N whitespace-separated words of a premise
            (DocLens's compatibility mode: 500); unset means chunk long premises instead.
        nli_stride: Tokens shared by consecutive premise windows when chunking.
        nli_max_length: Tokens per model input (default: the tokenizer's limit, at most 512).
        nli_batch_size: Premise/hypothesis pairs per forward pass.
        compat: ``clinjudge`` (default: failed judgments count as not entailed, a citation
            needs to be named or be the only one, an empty ratio is undefined) or ``official``:
            the official DocLens evaluator's arithmetic (see ``docs/doclens.md``). It sets how
            the run is reported by default (``judge runs show``, ``export``, the report) and,
            while judging, accepts an entailed verdict that names none of several citations
            (no re-ask) and joins the other citations' text with a newline for the NLI model.
            Both arithmetics can be computed from any run.
    """

    model_config = ConfigDict(extra="forbid")

    min_claims: int = Field(default=1, ge=1, le=500)
    max_claims: int = Field(default=30, ge=1, le=500)
    citation_base: Literal[0, 1] = 0
    uncited: UncitedPolicy = "borrow_next"
    max_citations: int = Field(default=10, ge=1, le=100)
    source_units: SourceUnits = "auto"
    citations: bool = True
    batch_entailment: bool = True
    nli_model: str | None = None
    nli_device: str = "cpu"
    nli_threshold: float = Field(default=0.5, gt=0, lt=1)
    nli_truncate_words: int | None = Field(default=None, ge=1)
    nli_stride: int = Field(default=128, ge=0)
    nli_max_length: int | None = Field(default=None, ge=16)
    nli_batch_size: int = Field(default=16, ge=1, le=1024)
    compat: Compat = "clinjudge"

    @model_validator(mode="after")
    def _check_counts(self) -> DocLensSettings:
        if self.min_claims > self.max_claims:
            raise ValueError("min_claims must not exceed max_claims")
        return self
