"""The transformers backend on tiny checkpoints saved to disk and loaded like real ones."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from clinjudge.prm_bridge import Chain, PRMInputError, Step, TransformersPRM, make_format
from clinjudge.prm_bridge._render import encode
from tests.prm_bridge._tiny import (
    isolate_positions,
    save_exact_medprm,
    save_tiny,
    set_kind_logits,
    torch,
    transformers,
)

EPS = 1e-6


def _chain(texts: list[str], cid: str = "q1", cand: str = "a", **kw) -> Chain:
    return Chain(id=cid, candidate=cand, steps=[Step(text=t) for t in texts], **kw)


@pytest.fixture(scope="module")
def medprm_exact(tmp_path_factory) -> tuple[Path, float]:
    """A Med-PRM-style checkpoint whose P(+) at every tag is sigmoid(a / sqrt(1 + eps))."""
    path = tmp_path_factory.mktemp("medprm_exact")
    return path, save_exact_medprm(path, a=1.7)


def test_pair_softmax_exact_at_every_tag(medprm_exact):
    path, expected = medprm_exact
    scorer = TransformersPRM(str(path), make_format("medprm"), device="cpu")
    [result] = scorer.score([_chain(["one is two.", "so three.", "done"], question="Q?")])
    assert result.error is None
    assert [s.score for s in result.steps] == pytest.approx([expected] * 3, abs=1e-6)
    assert not any(s.flagged for s in result.steps)  # expected ~0.85 > 0.5


def test_vocab_softmax_exact_at_kind_token(tmp_path):
    tokenizer, model = save_tiny(tmp_path, "prm-clinic", seed=2)
    isolate_positions(model)
    kinds = {1: 2.0, 2: -1.0, 3: 0.5, 4: 3.0, 5: 1.0}  # reserved token n -> logit of '+'
    set_kind_logits(model, tokenizer, kinds)
    model.save_pretrained(tmp_path)
    steps = [
        Step(text="Asthma.", kind="problem"),
        Step(text="Wheeze today.", kind="sentence"),
        Step(kind="problem_completeness"),
        Step(kind="note_completeness"),
        Step(kind="end_of_note"),
    ]
    scorer = TransformersPRM(str(tmp_path), make_format("prm-clinic"), device="cpu")
    [result] = scorer.score([Chain(id="c", steps=steps, question="[doctor] hi")])
    vocab = len(tokenizer)

    def p(logit: float) -> float:
        z = math.exp(logit / math.sqrt(1 + EPS))
        return z / (z + vocab - 1)

    assert [s.score for s in result.steps] == pytest.approx(
        [p(kinds[n]) for n in (1, 2, 3, 4, 5)], abs=1e-6
    )


@pytest.fixture(scope="module")
def medprm_random(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("medprm_random")
    save_tiny(path, "medprm", seed=3)
    return path


def test_batching_matches_one_by_one(medprm_random):
    chains = [
        _chain(["a short step."], "q1", "a", question="Q one"),
        _chain(["first step here", "second, longer step text", "third"], "q1", "b", question="Q"),
        _chain([f"step number {i}" for i in range(7)], "q2", "a", question="another question"),
        _chain(["x"], "q3", "a", question="", documents=["doc one", "doc two"]),
    ]
    fmt = make_format("medprm")
    batched = TransformersPRM(str(medprm_random), fmt, device="cpu", batch_tokens=100_000)
    single = TransformersPRM(str(medprm_random), fmt, device="cpu", batch_tokens=1)
    together = batched.score(chains)
    alone = [single.score([c])[0] for c in chains]
    for a, b in zip(together, alone, strict=True):
        assert (a.id, a.candidate) == (b.id, b.candidate)
        assert [s.score for s in a.steps] == pytest.approx([s.score for s in b.steps], abs=1e-5)
    # random weights: the scores differ between steps, so the gathering really is per row
    assert len({round(s.score, 6) for s in together[2].steps}) > 1


def test_scores_equal_a_plain_forward_pass(medprm_random):
    """The head-on-gathered-hidden-states shortcut equals softmax over full logits."""
    fmt = make_format("medprm")
    scorer = TransformersPRM(str(medprm_random), fmt, device="cpu")
    chain = _chain(["alpha step", "beta step"], question="Why?")
    [result] = scorer.score([chain])
    enc = encode(fmt, scorer.tokenizer, chain, None)
    with torch.no_grad():
        logits = scorer.model(torch.tensor([enc.input_ids])).logits[0]
    pair = logits[enc.positions][:, [scorer.plus_id, scorer.minus_id]]
    expected = torch.softmax(pair, dim=-1)[:, 0].tolist()
    assert [s.score for s in result.steps] == pytest.approx(expected, abs=1e-5)


def test_truncation_warns_and_never_silently(medprm_random):
    chain = _chain([f"step {i} " + "word " * 5 for i in range(6)], question="context " * 40)
    tokenizer = transformers.AutoTokenizer.from_pretrained(medprm_random)
    full = len(encode(make_format("medprm"), tokenizer, chain).input_ids)
    steps_fmt = make_format("medprm", {"max_length": full - 20, "truncation": "steps"})
    scorer = TransformersPRM(str(medprm_random), steps_fmt, device="cpu")
    [result] = scorer.score([chain])
    assert result.truncated and result.n_tokens == full - 20
    assert result.steps[-1].score is None and result.steps[0].score is not None
    assert any("truncated steps" in w for w in result.warnings)

    context_fmt = make_format("medprm", {"max_length": full - 100, "truncation": "context"})
    scorer = TransformersPRM(str(medprm_random), context_fmt, device="cpu")
    [result] = scorer.score([chain])
    assert result.truncated and result.n_tokens <= full - 100
    assert all(s.score is not None for s in result.steps)
    assert any("truncated context" in w for w in result.warnings)

    error_fmt = make_format("medprm", {"max_length": full - 1, "truncation": "error"})
    scorer = TransformersPRM(str(medprm_random), error_fmt, device="cpu")
    ok = _chain(["tiny"], "q9")
    results = scorer.score([chain, ok])
    assert results[0].error and "exceed the limit" in results[0].error
    assert results[1].error is None and results[1].steps[0].score is not None
    with pytest.raises(PRMInputError):
        encode(error_fmt, scorer.tokenizer, chain, None)


def test_checkpoint_without_the_preset_tokens_is_refused(medprm_random):
    from clinjudge.prm_bridge import PRMModelError

    with pytest.raises(PRMModelError, match="does not follow preset 'prm-clinic'"):
        TransformersPRM(str(medprm_random), make_format("prm-clinic"), device="cpu")


def test_concurrent_callers_share_batches(medprm_random):
    """Chains that wait while a forward pass runs are scored together, with the same scores."""
    import threading

    scorer = TransformersPRM(str(medprm_random), make_format("medprm"), device="cpu")
    chains = [_chain([f"step {n}", "next"], f"q{n}", question=f"Q{n}") for n in range(3)]
    alone = [scorer.score([c])[0] for c in chains]
    calls: list[int] = []
    forward = scorer._forward

    def counting(batch):
        calls.append(len(batch))
        return forward(batch)

    scorer._forward = counting  # type: ignore[method-assign]
    results: dict[int, object] = {}
    scorer._lock.acquire()  # a forward pass "in progress": the callers must queue
    threads = [
        threading.Thread(target=lambda n=n: results.update({n: scorer.score([chains[n]])[0]}))
        for n in range(3)
    ]
    for thread in threads:
        thread.start()
    while True:  # wait (no time limit asserted) until all three are queued
        with scorer._queue_lock:
            if len(scorer._waiting) == 3:
                break
        threading.Event().wait(0.01)
    scorer._lock.release()
    for thread in threads:
        thread.join()
    assert calls == [3]  # one batch for the three callers
    for n in range(3):
        assert [s.score for s in results[n].steps] == pytest.approx(  # type: ignore[attr-defined]
            [s.score for s in alone[n].steps], abs=1e-5
        )


def test_forward_failure_reaches_every_waiting_caller(medprm_random):
    scorer = TransformersPRM(str(medprm_random), make_format("medprm"), device="cpu")

    def broken(batch):
        raise RuntimeError("CUDA out of memory")

    scorer._forward = broken  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="out of memory"):
        scorer.score([_chain(["x"])])
    assert scorer._waiting == []


def test_full_logits_fallback_matches_the_head_shortcut(medprm_random):
    chain = _chain(["alpha step", "beta step", "gamma"], question="Why?")
    for fmt in (make_format("medprm"), make_format("medprm", {"softmax": "vocab"})):
        scorer = TransformersPRM(str(medprm_random), fmt, device="cpu")
        shortcut = [s.score for s in scorer.score([chain])[0].steps]
        scorer._decoder = None
        full = [s.score for s in scorer.score([chain])[0].steps]
        assert full == pytest.approx(shortcut, abs=1e-5)


def test_already_tagged_medprm_solution_scores_like_clean_steps(medprm_random):
    from clinjudge.prm_bridge._segment import split_chain

    scorer = TransformersPRM(str(medprm_random), make_format("medprm"), device="cpu")
    preamble, texts = split_chain("Step 1: first claim ки Step 2: second claim ки")
    tagged = Chain(id="t", steps=[Step(text=t) for t in texts], preamble=preamble, question="Q")
    clean = _chain(["first claim", "second claim"], "t", question="Q")
    [a], [b] = scorer.score([tagged]), scorer.score([clean])
    assert [s.score for s in a.steps] == pytest.approx([s.score for s in b.steps], abs=1e-6)
    assert any("removed 1 x ' ки' from step 1" in w for w in a.warnings)
