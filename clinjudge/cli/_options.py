"""The options of `judge run`, each defined once: name, type, panel, help and default shown.

A setting's name is its Python name, as ``clinjudge.evaluate``, ``clinjudge.estimate`` and
``run_config_from`` take it (``RunConfig`` and ``ModelSettings`` fields, and the composite ones
such as ``role_model``), so the command passes every value on by name: there is no hand-written
mapping. Typer's options are built from :data:`RUN_SETTINGS` (:func:`signature`), `judge audit`
takes a subset, and the CLI's error messages find each setting's flag here. A new setting of a
run is its field in ``RunConfig`` (or ``ModelSettings``) plus one line below.

Kept light, because `judge run --help` imports only typer and this module: the defaults shown
are written here (tests/cli/test_settings_registry.py checks them against the models'), never
read from ``RunConfig``, whose import pulls in the model clients.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from clinjudge.cli._help import PANELS

# A read-side option (runs show, export, report, agree), kept here where no store is imported.
DocLensCompatOption = Annotated[
    str | None,
    typer.Option(
        "--doclens-compat",
        help="DocLens scores by clinjudge's rules or the official evaluator's arithmetic "
        "(clinjudge or official; default: the run's own doclens.compat).",
    ),
]


PROGRESS_SECONDS_ENV = "CLINJUDGE_PROGRESS_SECONDS"
"""--progress-every's variable (the library reads it too, when no interval is given)."""
BATCH_POLL_SECONDS = 10.0
"""--poll-interval's default (``clinjudge._api.DEFAULT_POLL_SECONDS``)."""
DB_HELP = "DuckDB file."
DB_SHOWN = "the config file's db, else $CLINJUDGE_DB, else runs/clinjudge.duckdb"
ALLOW_FAILURES_HELP = (
    "Items allowed to end without a valid final judgment before the exit code is 1: N items "
    "or P% of the items (e.g. 5 or 10%)."
)

Scope = Literal["config", "call", "command"]
"""Where a value goes: ``config``, a run setting (``run_config_from``, the API's
``**options``); ``call``, an argument of ``evaluate``/``resume`` themselves (progress, limit,
batch...); ``command``, the command's own (``resume``, ``allow_failures``, ``dry_run``)."""


@dataclasses.dataclass(frozen=True)
class Setting:
    """One option of `judge run`.

    Args:
        name: The Python name (the API's keyword, the ``RunConfig``/``ModelSettings`` field).
        type: The type of the flag's value.
        panel: The help panel it is listed in.
        help: Its help text.
        shown: The default --help shows (None: typer shows ``default`` itself, if any).
        default: The parameter's default; None means not given, so the settings file or the
            model's default applies.
        decls: Flag declarations, when not ``--name`` (e.g. ``--cache/--no-cache``).
        scope: Where its value goes (see :data:`Scope`).
        extra: More of ``typer.Option``'s arguments (``min``, ``envvar``...).
    """

    name: str
    type: Any
    panel: str
    help: str
    shown: str | None = None
    default: Any = None
    decls: tuple[str, ...] = ()
    scope: Scope = "config"
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def flag(self) -> str:
        """The flag people type, e.g. ``--max-cost`` or ``--explanations``."""
        if self.decls:
            return self.decls[0].split("/")[0]
        return "--" + self.name.replace("_", "-")

    def parameter(self) -> inspect.Parameter:
        """The typer parameter (keyword-only, ``Annotated`` with its ``typer.Option``)."""
        settings: dict[str, Any] = {"rich_help_panel": self.panel, "help": self.help}
        if self.shown is not None:
            settings["show_default"] = self.shown
        # In Annotated, typer reads Option's positional arguments as the flag declarations.
        make: Callable[..., Any] = typer.Option
        option = make(*self.decls, **settings, **self.extra)
        return inspect.Parameter(
            self.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=self.default,
            annotation=Annotated[self.type, option],
        )


DATA, MODEL, SAMPLING, PANEL = PANELS.data, PANELS.model, PANELS.sampling, PANELS.panel
DOCLENS, PRM, LIMITS, OUTPUT = PANELS.doclens, PANELS.prm, PANELS.limits, PANELS.output
S = Setting

# In the order --help lists them within each panel (the panels' order is PANEL_ORDER).
# fmt: off
RUN_SETTINGS: tuple[Setting, ...] = (
    S("rubric", str | None, DATA, "Built-in rubric name or rubric file.", "pdsqi9"),
    S("mode", str | None, PANEL, "Judge mode: single, panel, magentic, or a mode a plugin "
      "registered.", "single"),
    S("data", Path | None, DATA, "Items to judge: JSONL, CSV or Parquet.",
      "required (or data: in --config)"),
    S("model", str | None, MODEL, "provider/model, e.g. openai/gpt-4o-mini, azure/DEPLOYMENT, "
      "anthropic/..., hf/PATH (a local model, in process; never the network), "
      "hf-hub/ORG/NAME (downloaded), mock/judge (simulated).",
      "$CLINJUDGE_MODEL, else mock/judge"),
    S("base_url", str | None, MODEL, "OpenAI-compatible endpoint (vLLM, Ollama, llama.cpp) or "
      "Azure endpoint.", "the provider's"),
    S("config", Path | None, DATA, "YAML file with any `judge run` settings.", "none"),
    S("samples", int | None, SAMPLING,
      "Samples per item (combined by the chosen reducer; the median by default).",
      "1"),
    S("reduce", str | None, SAMPLING, "How an item's valid samples become its final score: "
      "median, mean, trimmed_mean (without the lowest and highest n // 5), majority (the most "
      "frequent value; a tie takes the median of the tied values), or a reducer a plugin "
      "registered. Gates follow the median.", "median"),
    S("shots", int | None, DATA, "Few-shot examples per prompt.", "0"),
    S("shot_pool", Path | None, DATA, "Examples with human scores.", "none"),
    S("seed", int | None, SAMPLING, "Seed for drawing examples.", "0"),
    S("concurrency", int | None, LIMITS, "Model calls in flight.", "8"),
    S("db", str | None, OUTPUT, DB_HELP, DB_SHOWN),
    S("name", str | None, OUTPUT, "Label for the run."),
    S("temperature", float | None, MODEL, "Sampling temperature.", "0.01"),
    S("top_p", float | None, MODEL, "Nucleus sampling mass.", "0.95"),
    S("max_tokens", int | None, MODEL, "Cap on generated tokens.", "400"),
    S("reasoning_effort", Literal["minimal", "low", "medium", "high"] | None, MODEL,
      "Reasoning effort for reasoning models.", "the provider's"),
    S(
        "timeout",
        float | None,
        MODEL,
        "Seconds per model call (hf/: without progress of its model).",
        "120.0",
    ),
    S("structured_output", Literal["auto", "json_schema", "json_object", "off"] | None, MODEL,
      "Replies shaped by the rubric's JSON Schema (json_schema), JSON mode only (json_object) or "
      "neither (off); auto sends the schema and falls back to JSON mode where refused.", "auto"),
    S("timeout_retries", int | None, MODEL, "Retries of a call that timed out "
      "(retry.timeout_retries); a slow endpoint only gets slower when asked again.", "1",
      extra={"min": 0}),
    S("max_repairs", int | None, SAMPLING, "Re-asks after an invalid reply.", "1"),
    S("explanations", bool | None, SAMPLING, "Ask for an explanation per score.",
      "no-explanations", decls=("--explanations/--no-explanations",)),
    S("personas", str | None, PANEL, "panel/magentic: persona set, persona file or comma list "
      "of names.", "scoring"),
    S("rounds", int | None, PANEL, "magentic: discussion rounds.", "1"),
    S("max_turns", int | None, PANEL, "magentic: cap on agent turns.", "rounds x personas"),
    S("max_stalls", int | None, PANEL, "magentic: stalls before replan.", "3"),
    S("blind_first_round", bool | None, PANEL, "magentic: personas grade alone before "
      "discussing.", "no-blind-first-round",
      decls=("--blind-first-round/--no-blind-first-round",)),
    S("planning", bool | None, PANEL, "magentic: run the planning calls.", "planning",
      decls=("--planning/--no-planning",)),
    S("panel_aggregate", str | None, PANEL, "panel: how the members' scores combine, a reducer "
      "as for --reduce (median, mean, trimmed_mean, majority).", "median"),
    S("role_model", list[str] | None, MODEL, "Model for one agent or role, "
      "AGENT=provider/model (repeatable), e.g. orchestrator=openai/o3-mini.",
      "the judge model"),
    S("max_cost", float | None, LIMITS, "Dollar budget; no new work starts beyond it.",
      "no budget"),
    S("max_consecutive_failures", int | None, LIMITS, "Stop the run (resumable) after this "
      "many samples in a row fail with the same call fault (connection refused, timeouts, HTML "
      "replies...), or once all items (2 or more) failed that way before any sample "
      "succeeded; 0 never stops.", "10", extra={"min": 0}),
    S("shard", str | None, LIMITS, "i/n: judge only shard i of n (stable hash of the item id; "
      "audits hash the encounter id so vendors stay paired). Merge shards with `judge db "
      "merge`.", "all items"),
    S("nli", str | None, DOCLENS, "doclens: judge entailment with this Hugging Face NLI "
      "checkpoint (path or hub id) instead of the LLM; needs the prm extra (torch, "
      "transformers).", "the LLM"),
    S("prm", str | None, PRM, "Process reward model (checkpoint path or hub id) whose step "
      "scores the judges see: in the prompt (single, panel) or as a verifier agent "
      "(magentic); steps are stored in prm_steps. Needs the prm extra; more settings under "
      "`prm:` in the config file.", "none"),
    S("prm_preset", str | None, PRM, "--prm format preset: medprm, prm-clinic, math-shepherd "
      "or custom.", "from the model"),
    S("prm_url", str | None, PRM, "--prm via a vLLM pooling server at this URL (--prm: its "
      "tokenizer).", "in-process"),
    S("prm_device", str | None, PRM, "--prm device: auto, cpu or cuda[:N].", "auto"),
    S("prm_section", str | None, PRM, "--prm: part of the summary scored: all, "
      "assessment_plan or a heading name (default: the preset's; assessment_plan for "
      "prm-clinic)."),
    S("ray", str | None, PRM, "Run model replicas on Ray (one per GPU): an hf/ judge's "
      "batches, and with --prm every item's PRM scoring before judging starts. local (start "
      "one here), auto (this machine's cluster) or HOST:PORT; a cluster that does not answer "
      "within $CLINJUDGE_RAY_CONNECT_TIMEOUT seconds (30) is an error. API judges scale with "
      "--shard instead; needs the ray extra.", "in-process"),
    S("ray_replicas", int | None, PRM, "--ray: model replicas.",
      "one per GPU of the cluster, else 1", extra={"min": 1}),
    S("doclens", list[str] | None, DOCLENS, "doclens setting KEY=VALUE (repeatable), e.g. "
      "citation_base=1, uncited=zero, max_citations=3, min_claims=2, nli_truncate_words=500, "
      "compat=official; see docs/doclens.md.", "see docs/doclens.md"),
    S("rpm", int | None, LIMITS, "Requests per minute for the judge model.", "no limit"),
    S("tpm", int | None, LIMITS, "Tokens per minute for the judge model.", "no limit"),
    S("dry_run", bool, OUTPUT, "Render prompts, count tokens, estimate cost; call nothing.",
      default=False, decls=("--dry-run",), scope="command"),
    S("resume", str | None, OUTPUT, "Finish the missing work of an earlier run (id or unique "
      "prefix).", "a new run", scope="command"),
    S("progress", bool, OUTPUT, "Show a progress bar.", default=True, scope="call"),
    S("batch", bool, MODEL, "single mode, openai/ or azure/ models: send the work through the "
      "provider's batch API (half price, results within 24 h); --resume picks up a waiting "
      "batch.", default=False, decls=("--batch",), scope="call"),
    S("poll_interval", float, MODEL, "--batch: first wait between polls in seconds (doubles "
      "to 300).", default=BATCH_POLL_SECONDS, scope="call", extra={"min": 0}),
    S("allow_failures", str, LIMITS, ALLOW_FAILURES_HELP, default="0", scope="command"),
    S("progress_every", float | None, OUTPUT, "Off a terminal (nohup, CI, notebooks): seconds "
      "between progress lines.", "30", scope="call",
      extra={"min": 0, "envvar": PROGRESS_SECONDS_ENV, "show_envvar": True}),
    S("limit", int | None, LIMITS, "Judge only the first N items (with --shuffle: N items drawn "
      "with --seed); try a paid model on a few items first.", "all items", scope="call",
      extra={"min": 1}),
    S("shuffle", bool, LIMITS, "--limit draws a seeded random sample of items.", default=False,
      decls=("--shuffle",), scope="call"),
    S("cache", bool | None, MODEL, "Reuse replies stored in the database for identical "
      "requests (same model, settings, messages and sample number): hits cost $0 and call "
      "nothing; calls.cached marks them.", "off", decls=("--cache/--no-cache",)),
    S("drop_suspect", bool | None, SAMPLING, "Leave samples with a suspect-judgment flag "
      "(reply at the token cap, filler or copied reasons, a reason contradicting its score) "
      "out of the final scores; by default flags are evidence only (docs/trust.md).",
      "no-drop-suspect", decls=("--drop-suspect/--no-drop-suspect",)),
)
# fmt: on
SETTINGS = {s.name: s for s in RUN_SETTINGS}

# `judge audit`'s options in --help order: these run settings as they are, and its own (named).
AUDIT_LAYOUT: Layout = (
    *(
        SETTINGS[name]
        for name in (
            "rubric",
            "mode",
            "model",
            "base_url",
            "config",
            "samples",
            "reduce",
            "concurrency",
            "personas",
            "max_cost",
            "name",
            "shard",
            "prm",
            "batch",
            "poll_interval",
        )  # fmt: skip
    ),
    "flag",
    "out",
    "as_json",
    "boot",
    dataclasses.replace(SETTINGS["seed"], help="Seed (examples and bootstrap)."),
    dataclasses.replace(SETTINGS["dry_run"], help="Estimate tokens and cost; call nothing."),
    SETTINGS["db"],
    SETTINGS["progress"],
    SETTINGS["allow_failures"],
    "ratings",
    "strict",
)

DbOption = Annotated[
    str | None, typer.Option(rich_help_panel=PANELS.output, help=DB_HELP, show_default=DB_SHOWN)
]
"""--db of `judge audit plan` (as `judge run`'s)."""


Layout = Sequence[Setting | str]
"""A command's options in --help order: registry entries, and names of the command function's
own parameters where they go among them (own parameters not named come first)."""


def signature(layout: Layout, own: Callable[..., Any] | None = None) -> inspect.Signature:
    """The typer signature of a command: its own parameters and the registry's, in order.

    Typer reads ``__signature__`` (``inspect.signature``), so the options are built from the
    registry while the function takes them as ``**values``. Every parameter is keyword-only:
    typer passes them all by name.

    Args:
        layout: The options in order (see :data:`Layout`).
        own: The command function (its ``**values`` parameter is left out).
    """
    found: dict[str, inspect.Parameter] = {}
    if own is not None:
        # eval_str: the modules use `from __future__ import annotations`; typer needs types.
        for param in inspect.signature(own, eval_str=True).parameters.values():
            if param.kind is not inspect.Parameter.VAR_KEYWORD:
                found[param.name] = param.replace(kind=inspect.Parameter.KEYWORD_ONLY)
    placed = {entry for entry in layout if isinstance(entry, str)}
    params = [param for name, param in found.items() if name not in placed]
    params += [found[e] if isinstance(e, str) else e.parameter() for e in layout]
    return inspect.Signature(params)


def with_settings(layout: Layout) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Give a command the options of the registry entries in ``layout``; it receives their
    values in ``**values``.

    Args:
        layout: The options in --help order (see :data:`Layout`).
    """

    def attach(command: Callable[..., None]) -> Callable[..., None]:
        command.__signature__ = signature(layout, command)  # type: ignore[attr-defined]
        return command

    return attach
