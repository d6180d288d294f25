"""An oracle for scripted quality endpoints (tests/stubs/quality_stub.py): it reads the answer out of the prompt."""

from __future__ import annotations

import re

# Correct bodies for some of the code specs; the oracle answers `pass` for the others.
CODE_BODIES = {
    "add": "return a + b",
    "square": "return x * x",
    "is_even": "return n % 2 == 0",
    "sum_list": "return sum(xs)",
    "reverse_string": "return s[::-1]",
    "uppercase": "return s.upper()",
}


def oracle_completion(prompt: str) -> str:
    """The right answer to a passkey, arithmetic or code prompt (a code body for CODE_BODIES' specs, `pass` for
    the others); "I do not know." to anything else."""
    if m := re.search(r"The pass key is (\d+)", prompt):
        return f" {m[1]}."
    if qs := re.findall(r"Q: What is (\d+) (plus|minus|times) (\d+)\?", prompt):
        a, op, b = qs[-1]
        ops = {"plus": lambda x, y: x + y, "minus": lambda x, y: x - y, "times": lambda x, y: x * y}
        return f" {ops[op](int(a), int(b))}"
    if m := re.search(r'def (\w+)\([^)]*\):\n    """[^"]*"""$', prompt):
        return f"\n    {CODE_BODIES.get(m[1], 'pass')}\n\n\nprint('done')"
    return " I do not know."


def oracle_chat(messages: list[dict]) -> str:
    """The fact the multi-turn chat's last question asks for, read out of its first message."""
    facts = messages[0]["content"]
    question = messages[-1]["content"].lower()
    # "...? Answer with the name only." ends several questions: look for "name" last.
    for key, pattern in (
        ("dog", r"my dog is called (\w+)"),
        ("city", r"I live in (\w+)"),
        ("colour", r"colour is (\w+)"),
        ("number", r"lucky number is (\d+)"),
        ("name", r"my name is (\w+)"),
    ):
        if key in question:
            return f"It is {re.search(pattern, facts)[1]}."
    return "No idea."
