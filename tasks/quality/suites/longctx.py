"""Long-context retrieval: a pass key hidden in filler text, over context lengths x needle depths.

The classic passkey test (Mohtashami & Jaggi, Landmark Attention): repeated filler sentences,
one "The pass key is NNNNN. Remember it." line at a given depth (0 % = start, 100 % = end),
then the question. Greedy, exact match of the number. Each (length, depth) cell has `trials`
samples with seeded keys, so the grid of accuracies is reproducible; `v_longctx_grid` shows it.
"""

from __future__ import annotations

import json
import random
from typing import Annotated

from pydantic import Field

from tasks.engines.tokenizer import no_tokenizer_note
from tasks.quality.base import (
    Score,
    Suite,
    SuiteContext,
    SuiteParams,
    SuiteResult,
    binary_scores,
    complete_sample,
)
from tasks.quality.texts import parse_int

HEADER = (
    "There is an important pass key hidden inside a lot of irrelevant text. "
    "Find it and memorize it. I will quiz you about the pass key.\n\n"
)
FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
NEEDLE = "The pass key is {key}. Remember it. {key} is the pass key. "
QUESTION = "\n\nWhat is the pass key? The pass key is"
ANSWER_TOKENS = 8
# Room left in the context for the answer and for tokenization differences at the joins.
_MARGIN_TOKENS = ANSWER_TOKENS + 8


class LongCtxParams(SuiteParams):
    context_tokens: list[Annotated[int, Field(ge=1, le=1_048_576)]] = Field(
        default_factory=lambda: [512, 1024, 2048],
        min_length=1,
        max_length=64,
        description="prompt lengths (tokens); longer than the served context -> clipped to it",
    )
    depths_pct: list[Annotated[float, Field(ge=0, le=100)]] = Field(
        default_factory=lambda: [0.0, 50.0, 100.0], min_length=1, max_length=64, description="needle depths (%)"
    )
    trials: int = Field(default=1, ge=1, le=1000, description="samples per (length, depth) cell")


def _count(tok, text: str) -> int:
    # Without the model's tokenizer (a bare endpoint) ~4 characters per token is close for English.
    return tok.count(text) if tok is not None else max(1, len(text) // 4)


def passkey_prompt(tok, context_tokens: int, depth_pct: float, key: int) -> str:
    """A prompt of about `context_tokens` tokens with the needle after `depth_pct` % of the filler."""
    needle = NEEDLE.format(key=key)
    fixed = _count(tok, HEADER + needle + QUESTION)
    units = max(1, (context_tokens - fixed) // _count(tok, FILLER))
    before = round(units * depth_pct / 100.0)
    return HEADER + FILLER * before + needle + FILLER * (units - before) + QUESTION.lstrip(" ")


def grid(p: LongCtxParams, n_ctx: int) -> tuple[list[int], list[str]]:
    """The lengths to run (clipped to the served context, deduplicated) and notes on any clipping."""
    limit = n_ctx - _MARGIN_TOKENS
    lengths, notes = [], []
    for n in p.context_tokens:
        if n > limit:
            notes.append(f"{n} clipped to {limit} (served context {n_ctx})")
        n = min(n, limit)
        if n not in lengths:
            lengths.append(n)
    return lengths, notes


class LongContext(Suite):
    name = "longctx"
    version = "1"
    Params = LongCtxParams

    def supply(self, params: LongCtxParams) -> int:
        # at most: lengths clipped to the served context may merge (known only once it is served)
        return len(set(params.context_tokens)) * len(params.depths_pct) * params.trials

    def run(self, ctx: SuiteContext) -> SuiteResult:
        p = self.params(ctx)
        tok = ctx.tokenizer()
        lengths, notes = grid(p, ctx.n_ctx)
        rng = random.Random(ctx.seed)
        cells = [(n, d, t, rng.randint(10_000, 99_999)) for n in lengths for d in p.depths_pct for t in range(p.trials)]
        # Deepest needle first within a length: consecutive prompts share the longest prefix, which
        # the server's prefix cache then reuses (quality does not depend on it, the run time does).
        cells.sort(key=lambda c: (c[0], -c[1], c[2]))
        if ctx.limit:
            cells = cells[: ctx.limit]
        res = SuiteResult()
        for n, depth, trial, key in cells:
            prompt = passkey_prompt(tok, n, depth, key)
            usage: dict = {}
            text, error = complete_sample(ctx, prompt, ANSWER_TOKENS, stop=["\n"], usage=usage)
            got = parse_int(text)
            valid = got is not None and error is None
            depth_label = f"{depth:g}"
            res.samples.append(
                {
                    "sample_id": f"ctx{n}-depth{depth_label}-t{trial}",
                    "prompt": None,
                    "target": str(key),
                    "response": text,
                    "score": float(got == key),
                    "valid": valid,
                    "details": json.dumps(
                        {
                            "context_tokens": n,
                            "depth_pct": depth,
                            "prompt_tokens": _count(tok, prompt),
                            "parsed": got,
                            "error": error,
                            "invalid": int(not valid),
                            "tokens_exact": tok is not None,
                            "tokenizer": tok.label if tok is not None else None,
                            # the server's own count of the prompt (its usage; a BOS it adds included)
                            "prompt_tokens_server": usage.get("prompt_tokens"),
                        }
                    ),
                }
            )
        res.scores = binary_scores(res.samples)
        if notes:
            res.scores[0].note = "; ".join(notes)
        # The per-length scores carry the length unit's caveat: without a tokenizer lengths are approximate.
        length_note = no_tokenizer_note("lengths approximate (~4 characters per token)") if tok is None else None
        for n in lengths:
            rows = [s for s in res.samples if json.loads(s["details"])["context_tokens"] == n]
            if rows:
                acc = sum(s["score"] for s in rows) / len(rows)
                res.scores.append(
                    Score(
                        f"accuracy_ctx{n}",
                        acc,
                        None,
                        len(rows),
                        "fraction",
                        True,
                        f"mean(score) where context_tokens={n}",
                        note=length_note,
                    )
                )
        return res
