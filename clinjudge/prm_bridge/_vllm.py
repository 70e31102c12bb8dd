"""The served backend: a vLLM server running the PRM with its pooling API.

The chains are rendered and tokenized here, with the checkpoint's own tokenizer, exactly as for
the in-process backend, and sent as token ids to ``POST /pooling`` with
``task="token_classify"``. The server must return probabilities (its classifier activation on):

* one row per token (``ALL`` pooling): the rows at our score positions are used;
* one row per step marker (``STEP`` pooling with ``step_tag_id``): used in order (only for
  formats that read at the marker, ``read_offset`` 0).

A row of two or more values holds P('+') in column ``vllm_plus_index`` (0 for a classifier built
from the [+, -] rows of the LM head; 1 for Qwen2.5-Math-PRM's [negative, positive] head); a
one-value row is P('+') itself. A full-vocabulary softmax (PRM-Clinic) cannot come back from
two classifier rows, so such formats are refused. See ``docs/prm.md`` for serving recipes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx

from clinjudge.prm_bridge._backend import DEFAULT_BATCH_TOKENS, PRMModelError, PRMScorer
from clinjudge.prm_bridge._presets import PRMFormat
from clinjudge.prm_bridge._render import Encoded
from clinjudge.prm_bridge._scorer import load_tokenizer

POOLING_TASK = "token_classify"


def pooling_endpoint(url: str) -> str:
    """``…/pooling`` of a server URL (a trailing ``/v1`` or ``/pooling`` is accepted)."""
    base = url.rstrip("/")
    for suffix in ("/pooling", "/v1"):
        base = base.removesuffix(suffix)
    return base + "/pooling"


class VLLMPRM(PRMScorer):
    """A PRM served by vLLM's pooling runner.

    Args:
        url: Server address, e.g. ``http://127.0.0.1:8000``.
        fmt: The PRM format (pair softmax only).
        tokenizer: Checkpoint directory or hub id of the served model's tokenizer.
        served_model: Model name the server knows (default: ``tokenizer``).
        api_key: Bearer token, if the server wants one.
        batch_tokens: Tokens per request.
        max_length: Token limit.
        timeout: Seconds per request.
        transport: httpx transport (tests).
    """

    def __init__(
        self,
        url: str,
        fmt: PRMFormat,
        *,
        tokenizer: str,
        served_model: str | None = None,
        api_key: str | None = None,
        batch_tokens: int = DEFAULT_BATCH_TOKENS,
        max_length: int | None = None,
        timeout: float = 300.0,
        transport: httpx.BaseTransport | None = None,
    ):
        if fmt.softmax == "vocab":
            raise PRMModelError(
                f"format {fmt.name!r} reads P('+') from a full-vocabulary softmax, which a vLLM "
                "pooling server cannot return; score it in-process (without a PRM server url)"
            )
        super().__init__(
            fmt,
            load_tokenizer(tokenizer),
            served_model or tokenizer,
            max_length=max_length,
            batch_tokens=batch_tokens,
        )
        self.endpoint = pooling_endpoint(url)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(timeout=timeout, headers=headers, transport=transport)

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._client.close()

    def _post(self, batch: Sequence[Encoded]) -> list[Any]:
        payload = {
            "model": self.model_name,
            "input": [enc.input_ids for enc in batch],
            "task": POOLING_TASK,
            "use_activation": True,  # probabilities, not logits (the default for this task)
        }
        try:
            response = self._client.post(self.endpoint, json=payload)
        except httpx.HTTPError as exc:
            raise PRMModelError(f"{self.endpoint}: {exc}") from exc
        if response.status_code != 200:
            raise PRMModelError(
                f"{self.endpoint}: HTTP {response.status_code}: {response.text[:300]}"
            )
        try:
            data = sorted(response.json()["data"], key=lambda d: d.get("index", 0))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise PRMModelError(f"{self.endpoint}: not a pooling response: {exc}") from exc
        if len(data) != len(batch):
            raise PRMModelError(f"{self.endpoint}: {len(data)} results for {len(batch)} inputs")
        return [item.get("data") for item in data]

    def _plus(self, row: Any) -> float:
        values = row if isinstance(row, list) else [row]
        if len(values) == 1:
            return float(values[0])
        return float(values[self.format.vllm_plus_index])

    def _forward(self, batch: Sequence[Encoded]) -> list[list[float]]:
        out = []
        for enc, rows in zip(batch, self._post(batch), strict=True):
            if not isinstance(rows, list):
                raise PRMModelError(f"{self.endpoint}: a result holds no rows")
            positions = [p for p in enc.positions if p is not None]
            if len(rows) == len(enc.input_ids):
                out.append([self._plus(rows[p]) for p in positions])
            elif len(rows) == len(positions) and self.format.read_offset == 0:
                out.append([self._plus(row) for row in rows])
            else:
                raise PRMModelError(
                    f"{self.endpoint}: {len(rows)} rows for {len(enc.input_ids)} tokens and "
                    f"{len(positions)} steps; serve with ALL pooling, or STEP pooling on the "
                    "step tag id"
                )
        return out
