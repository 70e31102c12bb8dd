"""Provider prompt caching: cached input tokens read from replies, priced at their own rate,
and Anthropic requests marked with ``cache_control`` at the shared prefix."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from clinjudge.judges import JudgeModel, ModelSettings, token_prices
from clinjudge.judges.clients._pricing import call_cost
from clinjudge.judges.clients._settings import Price
from clinjudge.rubrics import ChatTurn, Rubric
from tests.fake_openai import FakeOpenAIServer

PRICE = Price(
    input_per_mtok=1000.0,
    output_per_mtok=3000.0,
    cached_input_per_mtok=100.0,
    cache_write_input_per_mtok=1250.0,
)


def _dollars(uncached: int, cached: int, written: int, out: int, price: Price) -> float:
    """The published formula, written out: each kind of token at its own price per million."""
    return (
        uncached * price.input_per_mtok
        + cached * (price.cached_input_per_mtok or price.input_per_mtok)
        + written * (price.cache_write_input_per_mtok or price.input_per_mtok)
        + out * price.output_per_mtok
    ) / 1e6


def test_cost_prices_each_kind_of_prompt_token_at_its_own_rate() -> None:
    settings = ModelSettings(model="openai/x", price=PRICE)
    # 5,000 prompt tokens: 3,000 read from the cache, 1,000 written, 1,000 plain; 200 out.
    got = call_cost(settings, 5000, 200, cached_input_tokens=3000, cache_write_tokens=1000)
    assert got == pytest.approx(_dollars(1000, 3000, 1000, 200, PRICE))
    assert got == pytest.approx(1.0 + 0.3 + 1.25 + 0.6)
    prices = token_prices(settings)
    assert prices is not None
    # Saving against the same prompt without a cache: reads save 0.9x, writes cost 0.25x more.
    assert prices.cache_saving(3000, 1000) == pytest.approx(3000 * 900e-6 - 1000 * 250e-6)


def test_unset_cache_prices_mean_no_discount() -> None:
    settings = ModelSettings(model="openai/x", price=Price(input_per_mtok=2.0, output_per_mtok=8.0))
    assert call_cost(settings, 2000, 100, cached_input_tokens=1500) == pytest.approx(
        (2000 * 2.0 + 100 * 8.0) / 1e6
    )


@pytest.mark.parametrize(
    ("model", "per_mtok"),
    [
        # Published list prices (USD per million tokens: input, cached input, cache write,
        # output): openai.com/api/pricing and Anthropic's pricing page, 2025.
        ("openai/gpt-4o-mini", (0.15, 0.075, 0.15, 0.60)),
        ("openai/gpt-4.1", (2.00, 0.50, 2.00, 8.00)),
        ("anthropic/claude-sonnet-4-5", (3.00, 0.30, 3.75, 15.00)),
    ],
)
def test_list_prices_of_cached_tokens(model: str, per_mtok: tuple[float, ...]) -> None:
    prices = token_prices(ModelSettings(model=model))
    assert prices is not None
    got = (prices.input, prices.cached_input, prices.cache_write, prices.output)
    assert got == pytest.approx(tuple(p / 1e6 for p in per_mtok))


def test_claude_without_cache_prices_in_the_map_gets_anthropics_multipliers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from clinjudge.judges.clients import _accounting

    entry = {"input_cost_per_token": 4e-6, "output_cost_per_token": 2e-5}
    monkeypatch.setattr(_accounting, "bundled_model_map", lambda: {"claude-new": entry})
    prices = token_prices(ModelSettings(model="anthropic/claude-new"))
    assert prices is not None
    assert prices.cached_input == pytest.approx(0.4e-6)  # 0.1 x input
    assert prices.cache_write == pytest.approx(5e-6)  # 1.25 x input


def _turns(item: str) -> list[ChatTurn]:
    system = " ".join(f"rule{i}" for i in range(200))  # what every item shares
    return [ChatTurn("system", system), ChatTurn("user", f"grade this: {item}")]


def _words(turns: list[ChatTurn]) -> list[str]:
    return [w for t in turns for w in t.content.split()]


def _shared_prefix(a: list[str], b: list[str]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@pytest.mark.parametrize("client", ["direct", "autogen"])
def test_cached_tokens_reported_by_the_server_are_recorded_and_priced(
    client: str, pdsqi9: Rubric
) -> None:
    prompts = [_turns("first"), _turns("first"), _turns("second")]
    with FakeOpenAIServer(prompt_cache_min=64) as srv:
        settings = ModelSettings(
            model="openai/local", base_url=srv.base_url, client=client, price=PRICE, timeout=10
        )

        async def send() -> list[Any]:
            model = JudgeModel(settings, pdsqi9)
            try:
                return [await model.generate(turns) for turns in prompts]
            finally:
                await model.close()

        outcomes = asyncio.run(send())
    # Independently: each prompt's longest shared prefix with an earlier one, in words.
    seen: list[list[str]] = []
    for turns, outcome in zip(prompts, outcomes, strict=True):
        words = _words(turns)
        shared = max((_shared_prefix(words, s) for s in seen), default=0)
        seen.append(words)
        expected = shared if shared >= 64 else 0
        assert outcome.prompt_tokens == len(words)
        assert outcome.cached_input_tokens == expected
        assert outcome.cache_write_tokens == 0
        uncached = outcome.prompt_tokens - expected
        assert outcome.cost_usd == pytest.approx(
            _dollars(uncached, expected, 0, outcome.completion_tokens, PRICE)
        )
        assert outcome.cache_saving_usd == pytest.approx(expected * 900 / 1e6)
    # The repeat is served whole; the second item shares the system prompt and "grade this:".
    assert [o.cached_input_tokens for o in outcomes] == [0, len(_words(prompts[0])), 202]


def test_counts_above_the_prompt_are_cut_to_it() -> None:
    from clinjudge.judges.clients._replies import reply_usage

    usage = reply_usage(
        {
            "prompt_tokens": 100,
            "completion_tokens": 5,
            "prompt_tokens_details": {"cached_tokens": 400},
        }
    )
    assert usage is not None and usage.cached_input_tokens == 100


# -- Anthropic through litellm: cache_control at the shared prefix ------------------------------


class _Captured:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []


def _anthropic_reply(model: str) -> Any:
    import litellm

    return litellm.ModelResponse(
        model=model,
        choices=[
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": '{"ok": 1}'},
            }
        ],
        usage=litellm.Usage(
            prompt_tokens=2300,
            completion_tokens=40,
            total_tokens=2340,
            cache_read_input_tokens=1800,
            cache_creation_input_tokens=400,
        ),
    )


def _complete_through_litellm(
    monkeypatch: pytest.MonkeyPatch, model: str, turns: list[ChatTurn], rubric: Rubric
) -> tuple[_Captured, Any]:
    import litellm

    captured = _Captured()

    async def fake_acompletion(**kwargs: Any) -> Any:
        captured.calls.append(kwargs)
        return _anthropic_reply(kwargs["model"])

    monkeypatch.setattr(litellm, "acompletion", fake_acompletion)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-not-real")
    settings = ModelSettings(model=model, structured_output="off")

    async def send() -> Any:
        judge = JudgeModel(settings, rubric)
        try:
            return await judge.generate(turns)
        finally:
            await judge.close()

    return captured, asyncio.run(send())


def test_anthropic_requests_mark_the_system_prompt_for_caching(
    monkeypatch: pytest.MonkeyPatch, pdsqi9: Rubric
) -> None:
    turns = _turns("an item")
    captured, outcome = _complete_through_litellm(
        monkeypatch, "anthropic/claude-sonnet-4-5", turns, pdsqi9
    )
    messages = captured.calls[0]["messages"]
    assert messages[0]["role"] == "system"
    assert messages[0]["content"] == [
        {"type": "text", "text": turns[0].content, "cache_control": {"type": "ephemeral"}}
    ]
    assert messages[1] == {"role": "user", "content": turns[1].content}  # the item: unmarked

    # The body litellm builds for Anthropic's API from these messages carries the marker on
    # the system block.
    from litellm.llms.anthropic.chat.transformation import AnthropicConfig

    body = AnthropicConfig().transform_request(
        model="claude-sonnet-4-5",
        messages=messages,
        optional_params={"max_tokens": 100},
        litellm_params={},
        headers={},
    )
    assert body["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert body["system"][-1]["text"] == turns[0].content
    assert all(
        not isinstance(part, dict) or "cache_control" not in part
        for message in body["messages"]
        for part in (message["content"] if isinstance(message["content"], list) else [])
    )

    # Anthropic's usage (via litellm): 2,300 prompt tokens of which 1,800 read, 400 written.
    assert (outcome.prompt_tokens, outcome.cached_input_tokens, outcome.cache_write_tokens) == (
        2300,
        1800,
        400,
    )
    list_price = (3.00, 0.30, 3.75, 15.00)  # $/M: input, cache read, cache write, output
    expected = (100 * list_price[0] + 1800 * list_price[1] + 400 * list_price[2]) / 1e6
    expected += 40 * list_price[3] / 1e6
    assert outcome.cost_usd == pytest.approx(expected)


def test_other_litellm_providers_are_sent_plain_messages(
    monkeypatch: pytest.MonkeyPatch, pdsqi9: Rubric
) -> None:
    turns = _turns("an item")
    captured, _ = _complete_through_litellm(monkeypatch, "mistral/mistral-small", turns, pdsqi9)
    assert captured.calls[0]["messages"][0] == {"role": "system", "content": turns[0].content}
