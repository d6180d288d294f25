"""arithmetic: GPT-3-style few-shot arithmetic over the variant's endpoint, greedy, exact match on the first integer."""

from __future__ import annotations

import json
import random
from typing import Any

from pydantic import Field

from tasks.core.errors import close_matches
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

_OPS = {"plus": (lambda a, b: a + b), "minus": (lambda a, b: a - b), "times": (lambda a, b: a * b)}


# GPT-3 arithmetic task names -> (digits, operation).
ARITH_TASKS = {
    "1D+": (1, "plus"),
    "1D-": (1, "minus"),
    "1Dx": (1, "times"),
    "2D+": (2, "plus"),
    "2D-": (2, "minus"),
    "3D+": (3, "plus"),
    "3D-": (3, "minus"),
    "4D+": (4, "plus"),
    "4D-": (4, "minus"),
    "5D+": (5, "plus"),
    "5D-": (5, "minus"),
    "2Dx": (2, "times"),
}


def arithmetic_problems(n: int, seed: int, tasks: list[str]) -> list[dict[str, Any]]:
    """`n` problems spread round-robin over `tasks`, operands drawn from a seeded RNG."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        task = tasks[i % len(tasks)]
        digits, op = ARITH_TASKS[task]
        a, b = (rng.randint(10 ** (digits - 1), 10**digits - 1) for _ in range(2))
        out.append({"id": f"{task}-{i}", "task": task, "question": f"What is {a} {op} {b}?", "answer": _OPS[op](a, b)})
    return out


class ArithmeticParams(SuiteParams):
    tasks: list[str] = Field(
        default_factory=lambda: ["1D+", "1D-", "1Dx", "2D+"],
        min_length=1,
        max_length=64,
        description=f"GPT-3 arithmetic tasks: {', '.join(ARITH_TASKS)}",
    )
    num_fewshot: int = Field(default=3, ge=0, le=64)

    def model_post_init(self, _: Any) -> None:
        unknown = [t for t in self.tasks if t not in ARITH_TASKS]
        if unknown:
            raise ValueError(close_matches(unknown[0], list(ARITH_TASKS), "arithmetic task"))


class Arithmetic(Suite):
    name = "arithmetic"
    version = "1"
    Params = ArithmeticParams
    extendable = True  # generated: item i is the same for any limit, and there is no last item

    def run(self, ctx: SuiteContext) -> SuiteResult:
        p = self.params(ctx)
        tasks = p.tasks
        shots = arithmetic_problems(p.num_fewshot, ctx.seed + 1_000_003, tasks)
        header = "".join(f"Q: {s['question']}\nA: {s['answer']}\n\n" for s in shots)
        res = SuiteResult()
        for p in arithmetic_problems(ctx.limit or 40, ctx.seed, tasks)[ctx.offset :]:
            prompt = f"{header}Q: {p['question']}\nA:"
            usage: dict = {}
            text, error = complete_sample(ctx, prompt, 12, stop=["\n", "Q:"], usage=usage)
            got = parse_int(text)
            valid = got is not None and error is None
            # The server's token counts per answer: v_cost prices an answer with them.
            res.samples.append(
                {
                    "sample_id": p["id"],
                    "prompt": prompt,
                    "target": str(p["answer"]),
                    "response": text,
                    "score": float(got == p["answer"]),
                    "valid": valid,
                    "details": json.dumps(
                        {
                            "task": p["task"],
                            "parsed": got,
                            "error": error,
                            "invalid": int(not valid),
                            "prompt_tokens": usage.get("prompt_tokens"),
                            "output_tokens": usage.get("completion_tokens"),
                        }
                    ),
                }
            )
        res.scores = self.score(res.samples)
        return res

    def score(self, samples: list[dict[str, Any]]) -> list[Score]:
        return binary_scores(samples)
