"""The NLI path with tiny sequence-classification models built inside the tests (no downloads).

A stub model that "entails" exactly when a marker token is in its input checks the premise
windows (max over windows) and the 500-word style truncation; a tiny BERT saved to disk goes
through the real loading path and a whole DocLens run.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.requirements import optional_module, require_module

torch = optional_module("torch")
transformers = optional_module("transformers")

from clinjudge.judges import DocLensSettings, ModelSettings  # noqa: E402
from clinjudge.judges.doclens._nli import (  # noqa: E402
    NLIError,
    NLIModel,
    _entailment_index,
    load_nli,
    truncate_words,
)
from clinjudge.orchestration import (  # noqa: E402
    RetryPolicy,
    RunConfig,
    create_run,
    execute_run,
    prepare_run,
)
from clinjudge.runs import RunStore  # noqa: E402
from tests.doclens_fake import ITEMS, make_responder  # noqa: E402
from tests.factories import write_jsonl  # noqa: E402
from tests.fake_openai import FakeOpenAIServer  # noqa: E402

_TEXT = (
    "the patient has had a cough for three days no fever at all any chest pain doctor what "
    "brings you in today i have start amoxicillin twice daily okay return in two weeks follow "
    "up with cardiology headache reports denies"
)
WORDS = _TEXT.split()
FAST = RetryPolicy(max_attempts=2, initial_wait=0.01, max_wait=0.02, jitter=0.0)
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def tokenizer() -> Any:
    vocab = {w: i for i, w in enumerate(dict.fromkeys(SPECIALS + WORDS))}
    return transformers.BertTokenizer(vocab=vocab)


def marker_model(marker: int) -> Any:
    """A model whose class derives from torch's Module, defined only once torch is needed."""

    class MarkerModel(torch.nn.Module):
        """Entailment (label 1) exactly when the marker token occurs in the input."""

        def __init__(self, marker: int):
            super().__init__()
            self.marker = marker
            self.rows_seen = 0

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any = None) -> Any:
            self.rows_seen += input_ids.shape[0]
            present = (input_ids == self.marker).any(dim=1).float()
            absent = 1 - present
            logits = torch.stack([-5 * present + 5 * absent, 5 * present - 5 * absent])
            return SimpleNamespace(logits=logits.T)

    return MarkerModel(marker)


def marker_nli(**kw: Any) -> tuple[NLIModel, Any]:
    tok = tokenizer()
    model = marker_model(tok.convert_tokens_to_ids("fever"))
    return NLIModel(model, tok, entailment=1, device="cpu", max_length=24, **kw), model


def test_entailment_label_from_config() -> None:
    assert _entailment_index({0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"}) == 2
    assert _entailment_index({"0": "entailment", "1": "not_entailment"}) == 0
    with pytest.raises(NLIError, match="entailment label"):
        _entailment_index({0: "LABEL_0", 1: "LABEL_1"})


def test_long_premise_is_windowed_and_max_is_taken() -> None:
    nli, model = marker_nli(stride=4, batch_size=3)
    premise = "cough " * 60 + "fever"
    probs = nli.entailment_probs([premise, "cough " * 60, "fever " + "cough " * 60], ["pain"] * 3)
    assert probs[0] > 0.99  # only the last window holds the marker
    assert probs[1] < 0.01
    assert probs[2] > 0.99
    assert model.rows_seen > 3 * 3  # each 61-word premise needed several 24-token windows


def test_doclens_truncation_drops_the_premise_tail() -> None:
    nli, model = marker_nli(truncate=500)
    assert truncate_words("a b  c\nd", 3) == "a b c"
    premise = "cough " * 600 + "fever"
    assert nli.entailment_probs([premise], ["pain"]) == [pytest.approx(0.0, abs=1e-3)]
    assert model.rows_seen == 1  # truncation: one input, no windows


@pytest.fixture(scope="module")
def always_entails(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny BERT NLI checkpoint whose classifier always favours ENTAILMENT (label 2)."""
    path = tmp_path_factory.mktemp("nli") / "tiny-nli"
    tok = tokenizer()
    config = transformers.BertConfig(
        vocab_size=len(tok),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
        num_labels=3,
        id2label={0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"},
        label2id={"CONTRADICTION": 0, "NEUTRAL": 1, "ENTAILMENT": 2},
    )
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(config)
    with torch.no_grad():
        model.classifier.weight.zero_()
        model.classifier.bias.copy_(torch.tensor([0.0, 0.0, 12.0]))
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_checkpoint_loads_once_with_label_mapping(always_entails: Path) -> None:
    first = load_nli(str(always_entails), max_length=32)
    again = load_nli(str(always_entails), stride=8)
    assert first.model is again.model  # loaded once per process
    assert first.entailment == 2 and again.max_length == 64
    assert first.entailment_probs(["the patient has a cough"], ["no fever"])[0] > 0.99
    with pytest.raises(NLIError, match="cannot load"):
        load_nli(str(always_entails.parent / "missing-model"))


def test_doclens_run_with_nli_model(always_entails: Path, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "items.jsonl", ITEMS)
    with FakeOpenAIServer(make_responder()) as server:
        config = RunConfig(
            rubric="doclens",
            data=str(data),
            db=str(tmp_path / "runs.duckdb"),
            judge=ModelSettings(model="openai/x", base_url=server.base_url, timeout=5.0),
            retry=FAST,
            doclens=DocLensSettings(nli_model=str(always_entails), nli_max_length=32),
        )
        prepared = prepare_run(config)
        store = RunStore(config.db)
        run_id = create_run(store, prepared)
        tally = execute_run(store, run_id, prepared, show_progress=False)
    assert tally.ok == 2
    assert server.request_count == 4  # the LLM only extracted claims; the NLI model judged
    values = {
        (r["item_id"], r["attribute"]): r["value"]
        for r in store.query(
            "SELECT * FROM judgments WHERE run_id = ? AND agent = 'judge'", [run_id]
        )
    }
    # Everything with known citations is entailed, and every citation counts; item b's
    # sentence citing unknown unit [7] is not: 2 of 3 statements, 2 of 3 citations.
    assert values[("a", "claim_recall")] == values[("a", "citation_precision")] == 1.0
    assert values[("b", "citation_recall")] == pytest.approx(2 / 3)
    assert values[("b", "citation_precision")] == pytest.approx(2 / 3)
    rows = store.query(
        "SELECT score, explanation FROM claims WHERE run_id = ? AND kind = 'recall'", [run_id]
    )
    assert all(r["score"] > 0.99 and r["explanation"].startswith("NLI P(") for r in rows)
    nli_calls = store.query(
        "SELECT item_id, model, status, cost_usd FROM calls WHERE run_id = ? AND role = 'nli'",
        [run_id],
    )
    assert {r["item_id"] for r in nli_calls} == {"a", "b"}  # every forward pass is recorded
    assert all(
        r["model"] == str(always_entails) and r["status"] == "ok" and r["cost_usd"] == 0.0
        for r in nli_calls
    )
    store.close()


def test_bad_nli_model_is_a_config_error(tmp_path: Path) -> None:
    from clinjudge.orchestration import ConfigError
    from clinjudge.orchestration._preflight import check_doclens_config

    require_module("transformers")  # without it the missing extra is reported first

    missing = RunConfig(doclens=DocLensSettings(nli_model=str(tmp_path / "nope")))
    with pytest.raises(ConfigError, match="doclens.nli_model: cannot load"):
        check_doclens_config(missing)
    check_doclens_config(RunConfig())  # no NLI model: nothing to check
