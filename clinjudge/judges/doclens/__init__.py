"""DocLens: claim recall, claim precision and citation quality of a generated text.

Claims are extracted from the output and the reference, each is checked for entailment by an
LLM judge (single, panel or discussion) or an NLI model, and citations are checked against the
numbered source. Importing this package registers the claim workflows of ``method: claims``
rubrics and the mock provider's DocLens replies."""

# Imported for its registration (the magentic workflow; DocLens's simulated replies).
from clinjudge.judges.doclens import _simulated  # noqa: F401
from clinjudge.judges.doclens._citations import source_units
from clinjudge.judges.doclens._context import DocLensContext
from clinjudge.judges.doclens._metrics import ENTAILED, FAILED, Tally
from clinjudge.judges.doclens._nli import NLIError, load_nli
from clinjudge.judges.doclens._settings import DocLensSettings
from clinjudge.judges.doclens._workflows import doclens_estimate_prompts, majority

__all__ = [
    "DocLensContext",
    "DocLensSettings",
    "ENTAILED",
    "FAILED",
    "NLIError",
    "Tally",
    "doclens_estimate_prompts",
    "load_nli",
    "majority",
    "source_units",
]
