"""Code that runs inside HELM's own environment, never in tradeoff's (see tasks/quality/suites/helm.py).

helm-run loads this file with `--plugins`; the generated model_deployments.yaml names
`CompletionsClient` as the client of every variant. Run as a script it exports a GGUF's
tokenizer as a Hugging Face tokenizer folder that HELM loads offline:

    python helm_plugin.py export-tokenizer MODEL.gguf OUT_DIR

Why a client of our own rather than HELM's VLLMClient: that client always asks for
logprobs (llama-cpp-python's server refuses them unless it keeps every position's logits,
which would slow the variant being measured) and treats a failed request as fatal, so one
dead endpoint would lose the whole run. This one sends plain greedy /v1/completions requests,
counts the output with the model's own tokenizer (HELM's `truncate_and_tokenize_response_text`)
and turns a failed request into a non-fatal, non-retried error: HELM scores it as an empty
completion and the run's other instances are kept.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Dict

import requests

try:  # absent when run as the tokenizer-export script outside helm-run
    from helm.clients.client import CachingClient, truncate_and_tokenize_response_text
    from helm.common.cache import CacheConfig
    from helm.common.request import ErrorFlags, Request, RequestResult, wrap_request_time
    from helm.tokenizers.tokenizer import Tokenizer
except ImportError:  # pragma: no cover
    CachingClient = object  # type: ignore[misc,assignment]

ERROR_PREFIX = "tradeoff-endpoint-error: "


def checked_completion(response: Any) -> Dict[str, Any]:
    """The endpoint's JSON answer when it has a completion's shape; ValueError naming what is wrong (the instance
    then errs, as for a broken connection, instead of an exception that ends the HELM run)."""
    choices = response.get("choices") if isinstance(response, dict) else None
    choice = choices[0] if isinstance(choices, list) and choices else None
    if not isinstance(choice, dict):
        raise ValueError("malformed answer: choices[0] is not an object")
    if not isinstance(choice.get("text"), (str, type(None))) or not isinstance(
        choice.get("finish_reason"), (str, type(None))
    ):
        raise ValueError("malformed answer: choices[0].text or finish_reason is not a string")
    return response


class CompletionsClient(CachingClient):  # type: ignore[misc,valid-type]
    """Greedy text completions from an OpenAI-compatible /v1/completions endpoint, without logprobs."""

    def __init__(
        self,
        tokenizer: "Tokenizer",
        tokenizer_name: str,
        cache_config: "CacheConfig",
        base_url: str,
        served_model: str,
        end_of_text_token: str | None = None,
        timeout_s: float = 300.0,
    ):
        super().__init__(cache_config=cache_config)
        self.tokenizer = tokenizer
        self.tokenizer_name = tokenizer_name
        self.url = base_url.rstrip("/") + "/v1/completions"
        self.served_model = served_model
        self.end_of_text_token = end_of_text_token
        self.timeout_s = timeout_s

    def _raw_request(self, request: "Request") -> Dict[str, Any]:
        return {
            "model": self.served_model,
            "prompt": request.prompt,
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
            "top_p": request.top_p,
            "stop": request.stop_sequences or None,
            "presence_penalty": request.presence_penalty,
            "frequency_penalty": request.frequency_penalty,
        }

    def make_request(self, request: "Request") -> "RequestResult":
        if request.echo_prompt or request.embedding or request.messages or request.multimodal_prompt:
            # Prompt logprobs (language-modelling scenarios), embeddings and chat/multimodal
            # prompts are out of scope: fail the run with one clear line rather than score garbage.
            raise ValueError(
                "tradeoff's HELM client sends text completions only: scenarios that need prompt "
                "logprobs (echo), embeddings or chat/multimodal prompts are not supported"
            )
        completions, cached_all, request_time = [], True, 0.0
        for i in range(request.num_completions):
            raw = self._raw_request(request)
            # The served name can be the same for every variant: the deployment keeps them apart (not the
            # URL, so a re-run in the same run folder reuses the answers already cached).
            key = CachingClient.make_cache_key(
                {**raw, "completion_index": i, "deployment": request.model_deployment}, request
            )

            def do_it(raw: Dict[str, Any] = raw) -> Dict[str, Any]:
                r = requests.post(self.url, json=raw, timeout=self.timeout_s)
                r.raise_for_status()
                return checked_completion(r.json())

            try:
                response, cached = self.cache.get(key, wrap_request_time(do_it))
            except (requests.RequestException, ValueError, RecursionError) as err:
                # Connection refused, timeout, HTTP error or a broken body: this instance errored.
                error = ERROR_PREFIX + f"{type(err).__name__}: {err}".splitlines()[0][:300]
                return RequestResult(
                    success=False,
                    cached=False,
                    error=error,
                    completions=[],
                    embedding=[],
                    error_flags=ErrorFlags(is_retriable=False, is_fatal=False),
                )
            choice = response["choices"][0]
            completions.append(
                truncate_and_tokenize_response_text(
                    choice.get("text") or "",
                    request,
                    self.tokenizer,
                    self.tokenizer_name,
                    end_of_text_token=self.end_of_text_token,
                    original_finish_reason=choice.get("finish_reason") or "endoftext",
                )
            )
            cached_all = cached_all and cached
            request_time += response["request_time"]
        return RequestResult(
            success=True, cached=cached_all, request_time=request_time, completions=completions, embedding=[]
        )


def _no_nltk_downloads() -> None:
    """Offline runs: HELM's metric modules call nltk.download('punkt_tab') on import (for BLEU/ROUGE);
    without this it tries the network every run. The metrics that need punkt_tab then fail with
    nltk's own 'Resource not found' error instead."""
    if os.environ.get("TRADEOFF_HELM_OFFLINE") != "1":
        return
    try:
        import nltk
    except ImportError:
        return
    nltk.download = lambda *args, **kwargs: False


_no_nltk_downloads()


def export_tokenizer(gguf_path: str, out_dir: str) -> Dict[str, Any]:
    """Save the GGUF's own tokenizer as a Hugging Face tokenizer folder; returns its special tokens."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(
        os.path.dirname(os.path.abspath(gguf_path)), gguf_file=os.path.basename(gguf_path)
    )
    tok.save_pretrained(out_dir)
    return {"bos_token": tok.bos_token, "eos_token": tok.eos_token, "vocab_size": len(tok)}


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "export-tokenizer":
        sys.exit("usage: helm_plugin.py export-tokenizer MODEL.gguf OUT_DIR")
    print(json.dumps(export_tokenizer(sys.argv[2], sys.argv[3])))
