"""DocLens: claim recall, claim precision and citation quality of a generated text.

Claims are extracted from the output and the reference, each is checked for entailment by an
LLM judge (single, panel or discussion) or an NLI model, and citations are checked against the
numbered source. Importing this package registers the claim workflows of ``method: claims``
rubrics and the mock provider's DocLens replies."""

from clinjudge.judges.doclens._citations import (
    NumberedSource,
    Statement,
    output_statements,
    remove_citations,
    source_units,
    split_statements,
)
from clinjudge.judges.doclens._context import DocLensContext, DocLensRunSettings
from clinjudge.judges.doclens._metrics import (
    ENTAILED,
    FAILED,
    NOT_ENTAILED,
    VERDICTS,
    Tally,
    citation_tallies,
    claim_tally,
    counted_citations,
)
from clinjudge.judges.doclens._nli import NLIError, NLIModel, load_nli
from clinjudge.judges.doclens._settings import Compat, DocLensSettings, SourceUnits, UncitedPolicy
from clinjudge.judges.doclens._simulated import simulated_doclens_reply
from clinjudge.judges.doclens._workflows import (
    doclens_estimate_prompts,
    doclens_magentic,
    doclens_panel,
    doclens_single,
    majority,
)

__all__ = [
    "Compat",
    "DocLensContext",
    "DocLensRunSettings",
    "DocLensSettings",
    "ENTAILED",
    "FAILED",
    "NLIError",
    "NLIModel",
    "NOT_ENTAILED",
    "NumberedSource",
    "SourceUnits",
    "Statement",
    "Tally",
    "UncitedPolicy",
    "VERDICTS",
    "citation_tallies",
    "claim_tally",
    "counted_citations",
    "doclens_estimate_prompts",
    "doclens_magentic",
    "doclens_panel",
    "doclens_single",
    "load_nli",
    "majority",
    "output_statements",
    "remove_citations",
    "simulated_doclens_reply",
    "source_units",
    "split_statements",
]
