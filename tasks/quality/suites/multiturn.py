"""Multi-turn consistency: facts given in the first turn of a chat, asked back after distractor turns.

Each conversation draws facts from a seed (a name, a pet's name, a city, a colour, a number),
states them in the first user turn, continues with `distractor_turns` unrelated exchanges and
then asks one of the facts back. Greedy, over the chat endpoint (the engine applies the model's
chat template). Correct when the answer contains the fact (case-insensitive). The assistant's
intermediate replies are fixed text unless `live_turns` is set, so every variant sees the same
conversation and only the final answer is the model's.
"""

from __future__ import annotations

import json
import random

from pydantic import Field

from tasks.client import HTTPError, chat
from tasks.quality.base import Suite, SuiteContext, SuiteParams, SuiteResult, binary_scores, error_text

NAMES = ["Alice", "Marco", "Priya", "Tomasz", "Yuki", "Fatima", "Oscar", "Lena", "Kwame", "Ines"]
PETS = ["Biscuit", "Pepper", "Nugget", "Shadow", "Maple", "Pickles", "Ziggy", "Waffles", "Luna", "Rocket"]
CITIES = ["Lisbon", "Nairobi", "Osaka", "Toronto", "Krakow", "Lima", "Dublin", "Hanoi", "Oslo", "Tunis"]
COLORS = ["green", "orange", "purple", "yellow", "turquoise", "crimson", "silver", "teal", "indigo", "amber"]
DISTRACTORS = [
    ("What is the capital of France?", "The capital of France is Paris."),
    (
        "Can you give me a tip for sleeping better?",
        "Try to go to bed at the same time every night and avoid screens before sleep.",
    ),
    ("How many legs does a spider have?", "A spider has eight legs."),
    ("What is a good name for a bakery?", "How about 'The Golden Crust'?"),
    ("Why is the sky blue?", "Sunlight is scattered by the air, and blue light is scattered the most."),
    ("Tell me a fun fact about octopuses.", "Octopuses have three hearts."),
    ("What is 12 times 12?", "12 times 12 is 144."),
    (
        "Suggest a short book to read on a train.",
        "'The Old Man and the Sea' by Ernest Hemingway is short and memorable.",
    ),
]
QUESTIONS = {
    "name": "What is my name? Answer with the name only.",
    "pet": "What is my dog called? Answer with the name only.",
    "city": "Which city do I live in? Answer with the city only.",
    "color": "What is my favourite colour? Answer with the colour only.",
    "number": "What is my lucky number? Answer with the number only.",
}


class MultiTurnParams(SuiteParams):
    distractor_turns: int = Field(
        default=3, ge=0, le=len(DISTRACTORS), description="exchanges between facts and question"
    )
    max_tokens: int = Field(default=16, ge=1, le=4096, description="tokens of the final answer")
    live_turns: bool = Field(default=False, description="let the model write the intermediate replies (slower)")


def conversation(i: int, rng: random.Random, distractors: int) -> tuple[list[dict], str, str]:
    """(messages up to the question, the fact asked, the expected answer) of conversation `i`."""
    facts = {
        "name": rng.choice(NAMES),
        "pet": rng.choice(PETS),
        "city": rng.choice(CITIES),
        "color": rng.choice(COLORS),
        "number": str(rng.randint(10, 99)),
    }
    intro = (
        f"Hi! Some facts about me: my name is {facts['name']}, I live in {facts['city']}, my dog is called "
        f"{facts['pet']}, my favourite colour is {facts['color']} and my lucky number is {facts['number']}."
    )
    messages = [
        {"role": "user", "content": intro},
        {"role": "assistant", "content": f"Nice to meet you, {facts['name']}! I will remember that."},
    ]
    for q, a in rng.sample(DISTRACTORS, distractors):
        messages += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    asked = list(QUESTIONS)[i % len(QUESTIONS)]
    messages.append({"role": "user", "content": QUESTIONS[asked]})
    return messages, asked, facts[asked]


class MultiTurn(Suite):
    name = "multiturn"
    version = "1"
    Params = MultiTurnParams

    def run(self, ctx: SuiteContext) -> SuiteResult:
        p = self.params(ctx)
        rng = random.Random(ctx.seed)
        res = SuiteResult()
        for i in range(ctx.limit or 10):
            messages, asked, expected = conversation(i, rng, p.distractor_turns)
            error = None
            try:
                if p.live_turns:
                    messages = self._live(ctx, messages)
                answer = chat(ctx.base_url, ctx.served_model, messages, p.max_tokens, timeout_s=ctx.request_timeout_s)
            except HTTPError as err:
                answer, error = "", error_text(err)
            valid = bool(answer.strip()) and error is None
            res.samples.append(
                {
                    "sample_id": f"conv-{i}",
                    "prompt": json.dumps(messages),
                    "target": expected,
                    "response": answer,
                    "score": float(expected.lower() in answer.lower()),
                    "valid": valid,
                    "details": json.dumps(
                        {"asked": asked, "turns": len(messages), "error": error, "invalid": int(not valid)}
                    ),
                }
            )
        res.scores = binary_scores(res.samples)
        return res

    @staticmethod
    def _live(ctx: SuiteContext, messages: list[dict]) -> list[dict]:
        """The same conversation with every assistant turn after the first written by the model."""
        out = messages[:2]
        for m in messages[2:]:
            if m["role"] == "assistant":
                m = {
                    "role": "assistant",
                    "content": chat(ctx.base_url, ctx.served_model, out, 64, timeout_s=ctx.request_timeout_s),
                }
            out.append(m)
        return out
