"""Greedy output identity of a speculative variant against the same model without speculation.

At temperature 0 speculative decoding should be lossless: every output identical to plain
decoding. The suite sends the same prompts to the variant's server and to a sibling server of
the same variant with speculation off (same engine, artifact and settings), and reports the
share of identical outputs and where the first difference falls. Variants without speculation
are skipped (no rows). A rate below 1 is reported in the score's note: not lossless here.
"""

from __future__ import annotations

import json

import numpy as np
from pydantic import Field

from tasks.quality.base import (
    Score,
    Suite,
    SuiteContext,
    SuiteParams,
    SuiteResult,
    complete_sample,
    sibling_server,
)
from tasks.quality.texts import FIDELITY_TEXT, STORY_PROMPTS, STORY_TEMPLATE


class IdentityParams(SuiteParams):
    max_tokens: int = Field(default=64, ge=1, le=131_072, description="tokens generated per prompt")
    prompts: list[str] | None = Field(
        default=None, min_length=1, max_length=1000, description="prompts (default: built-in stories and text)"
    )


def default_prompts() -> list[str]:
    # Stories, and passages of text that repeat themselves: prompt-lookup drafts come from the prompt.
    sentences = [s.strip() + "." for s in FIDELITY_TEXT.split(".") if s.strip()]
    texts = [" ".join(sentences[i : i + 4]) + " " + " ".join(sentences[i : i + 2]) for i in range(0, len(sentences), 4)]
    return [STORY_TEMPLATE.format(prompt=p) for p in STORY_PROMPTS] + texts


def first_difference(a: list, b: list) -> int | None:
    """Index of the first position where two sequences differ, None when they are equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


class GreedyIdentity(Suite):
    name = "greedy_identity"
    version = "1"
    Params = IdentityParams

    def supply(self, params: IdentityParams) -> int:
        return len(params.prompts or default_prompts())

    def run(self, ctx: SuiteContext) -> SuiteResult:
        res = SuiteResult()
        if ctx.variant_spec is not None and ctx.variant_spec.speculative is None:
            return res  # nothing to compare: the variant decodes plainly
        p = self.params(ctx)
        prompts = (p.prompts or default_prompts())[: ctx.limit or 8]
        tok = ctx.tokenizer()
        spec_out = [complete_sample(ctx, prompt, p.max_tokens) for prompt in prompts]
        with sibling_server(ctx, "no-speculation", speculative=None) as plain_url:
            for i, (prompt, (spec_text, spec_err)) in enumerate(zip(prompts, spec_out)):
                plain_text, plain_err = complete_sample(ctx, prompt, p.max_tokens, base_url=plain_url)
                err = plain_err or spec_err
                a = tok.encode(spec_text) if tok else spec_text.split()
                b = tok.encode(plain_text) if tok else plain_text.split()
                diff = first_difference(a, b)
                res.samples.append(
                    {
                        "sample_id": f"prompt-{i}",
                        "prompt": prompt,
                        "target": plain_text,
                        "response": spec_text,
                        "score": float(err is None and spec_text == plain_text),
                        "valid": err is None,
                        "details": json.dumps(
                            {"first_difference_token": diff, "error": err, "invalid": int(err is not None)}
                        ),
                    }
                )
        n = len(res.samples)
        same = sum(s["score"] for s in res.samples)
        diffs = [
            json.loads(s["details"])["first_difference_token"] for s in res.samples if s["score"] == 0 and s["valid"]
        ]
        note = None if same == n else f"not lossless: {n - int(same)} of {n} greedy outputs differ from plain decoding"
        res.scores = [
            Score("identity_rate", same / n if n else None, None, n, "fraction", True, "mean(score)", note=note),
            Score(
                "first_difference_tokens_median",
                float(np.median([d for d in diffs if d is not None])) if diffs else None,
                None,
                n,
                "tokens",
                True,
                None,
                note=None if diffs else "no output differed",
            ),
        ]
        return res
