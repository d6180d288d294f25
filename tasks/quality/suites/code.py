"""Code validity: small Python functions written from specs; the share that parses and the share that passes.

Each problem is a function header and docstring drawn from a bank of specs with seeded
constants ("Return x plus 7."), with tests computed by a reference implementation. The model
completes the body (greedy, one worked example first). The body is the indented lines that
follow; it is parsed with `ast`, then called on the tests' inputs in the jail of `tasks.quality.sandbox`
(bubblewrap: no network, read-only view of the system, a fresh tmpfs, rlimits, killed as a whole
at the timeout). Only the inputs enter the jail; the outputs come back on the harness's channel
and are compared with the expected values here, so nothing the candidate prints or writes can
raise its score. Where the jail cannot start the suite fails with the reason; `sandbox: none`
(local engines only) runs the same harness unconfined.
"""

from __future__ import annotations

import ast
import json
import math
import random
import signal
from dataclasses import dataclass
from typing import Any, Callable, Literal
from urllib.parse import urlsplit

from pydantic import Field

from tasks.core.credentials import is_loopback
from tasks.quality.base import (
    Score,
    Suite,
    SuiteContext,
    SuiteParams,
    SuiteResult,
    complete_sample,
    invalid_rate_score,
)
from tasks.quality.sandbox import Limits, SandboxUnavailable, run_untrusted, unavailable_reason


@dataclass
class Problem:
    id: str
    name: str
    args: str
    doc: str
    tests: list[tuple[tuple, Any]]

    @property
    def header(self) -> str:
        # No newline after the docstring: the model writes it, with the body's indentation, as
        # one token ("\n    "); a prompt cut after "\n" would split that token and derail it.
        return f'def {self.name}({self.args}):\n    """{self.doc}"""'


def _ints(rng: random.Random, k: int, lo: int = -50, hi: int = 50) -> list[int]:
    return [rng.randint(lo, hi) for _ in range(k)]


def _words(rng: random.Random) -> str:
    pool = ["apple", "river", "stone", "cloud", "tiger", "paper", "level", "noon", "house", "green", "radar", "moon"]
    return " ".join(rng.choice(pool) for _ in range(rng.randint(1, 4)))


# name -> factory(rng) -> (args, docstring with seeded constants, reference function, test input generator)
Spec = Callable[[random.Random], tuple[str, str, Callable, Callable[[random.Random], tuple]]]


def _spec_bank() -> dict[str, Spec]:
    def const(lo, hi):
        return lambda rng: rng.randint(lo, hi)

    bank: dict[str, Spec] = {
        "add": lambda r: ("a, b", "Return the sum of a and b.", lambda a, b: a + b, lambda r: tuple(_ints(r, 2))),
        "add_k": lambda r: (lambda k: ("x", f"Return x plus {k}.", lambda x: x + k, lambda r: tuple(_ints(r, 1))))(
            const(2, 20)(r)
        ),
        "mul_k": lambda r: (
            lambda k: ("x", f"Return x multiplied by {k}.", lambda x: x * k, lambda r: tuple(_ints(r, 1)))
        )(const(2, 9)(r)),
        "square": lambda r: ("x", "Return the square of x.", lambda x: x * x, lambda r: tuple(_ints(r, 1))),
        "is_even": lambda r: (
            "n",
            "Return True if n is even, otherwise False.",
            lambda n: n % 2 == 0,
            lambda r: tuple(_ints(r, 1)),
        ),
        "maximum": lambda r: (
            "xs",
            "Return the largest number in the non-empty list xs.",
            max,
            lambda r: (_ints(r, r.randint(1, 6)),),
        ),
        "minimum": lambda r: (
            "xs",
            "Return the smallest number in the non-empty list xs.",
            min,
            lambda r: (_ints(r, r.randint(1, 6)),),
        ),
        "sum_list": lambda r: (
            "xs",
            "Return the sum of the numbers in the list xs.",
            sum,
            lambda r: (_ints(r, r.randint(0, 6)),),
        ),
        "list_length": lambda r: (
            "xs",
            "Return the number of elements in the list xs.",
            len,
            lambda r: (_ints(r, r.randint(0, 6)),),
        ),
        "reverse_string": lambda r: ("s", "Return the string s reversed.", lambda s: s[::-1], lambda r: (_words(r),)),
        "uppercase": lambda r: ("s", "Return the string s in upper case.", lambda s: s.upper(), lambda r: (_words(r),)),
        "count_words": lambda r: (
            "s",
            "Return the number of words in the string s (words are separated by spaces).",
            lambda s: len(s.split()),
            lambda r: (_words(r),),
        ),
        "is_palindrome": lambda r: (
            "s",
            "Return True if the string s reads the same forwards and backwards.",
            lambda s: s == s[::-1],
            lambda r: (r.choice(["level", "noon", "radar", "apple", "river", "abba", "abc"]),),
        ),
        "count_vowels": lambda r: (
            "s",
            "Return the number of vowels (a, e, i, o, u) in the string s.",
            lambda s: sum(c in "aeiou" for c in s),
            lambda r: (_words(r),),
        ),
        "factorial": lambda r: (
            "n",
            "Return n factorial (n! = 1 * 2 * ... * n, and 0! = 1).",
            math.factorial,
            lambda r: (r.randint(0, 8),),
        ),
        "fibonacci": lambda r: (
            "n",
            "Return the n-th Fibonacci number, with fibonacci(0) = 0 and fibonacci(1) = 1.",
            lambda n: _fib(n),
            lambda r: (r.randint(0, 15),),
        ),
        "sum_to_n": lambda r: (
            "n",
            "Return the sum of the integers from 1 to n.",
            lambda n: n * (n + 1) // 2,
            lambda r: (r.randint(0, 100),),
        ),
        "first_k": lambda r: (
            lambda k: (
                "xs",
                f"Return a list of the first {k} elements of the list xs.",
                lambda xs: xs[:k],
                lambda r: (_ints(r, r.randint(0, 7)),),
            )
        )(const(1, 4)(r)),
        "repeat_string": lambda r: (
            lambda k: ("s", f"Return the string s repeated {k} times.", lambda s: s * k, lambda r: (_words(r),))
        )(const(2, 4)(r)),
        "clamp": lambda r: (
            lambda lo, hi: (
                "x",
                f"Return x limited to the range from {lo} to {hi}.",
                lambda x: max(lo, min(hi, x)),
                lambda r: tuple(_ints(r, 1, -30, 30)),
            )
        )(const(-10, 0)(r), const(1, 10)(r)),
        "celsius_to_fahrenheit": lambda r: (
            "c",
            "Return the temperature c in degrees Celsius converted to degrees Fahrenheit.",
            lambda c: c * 9 / 5 + 32,
            lambda r: (r.randint(-40, 100),),
        ),
        "remove_spaces": lambda r: (
            "s",
            "Return the string s with all spaces removed.",
            lambda s: s.replace(" ", ""),
            lambda r: (_words(r),),
        ),
        "count_positive": lambda r: (
            "xs",
            "Return how many numbers in the list xs are greater than zero.",
            lambda xs: sum(x > 0 for x in xs),
            lambda r: (_ints(r, r.randint(0, 7)),),
        ),
        "absolute_difference": lambda r: (
            "a, b",
            "Return the absolute difference between a and b.",
            lambda a, b: abs(a - b),
            lambda r: tuple(_ints(r, 2)),
        ),
    }
    return bank


def _fib(n: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


SPECS = _spec_bank()
EXAMPLE = 'def double(x):\n    """Return x multiplied by 2."""\n    return x * 2\n\n\n'


def code_problems(n: int, seed: int, tests_per_problem: int = 5) -> list[Problem]:
    """`n` problems: the spec bank in a seeded order (cycled), constants and test inputs from the seed."""
    rng = random.Random(seed)
    names = sorted(SPECS)
    rng.shuffle(names)
    out = []
    for i in range(n):
        name = names[i % len(names)]
        args, doc, ref, gen = SPECS[name](rng)
        inputs = [gen(rng) for _ in range(tests_per_problem)]
        out.append(Problem(f"{name}-{i}", name, args, doc, [(x, ref(*x)) for x in inputs]))
    return out


def extract_body(completion: str) -> str:
    """The function body: the completion's lines (after the docstring's line) up to the first
    non-empty line that is not indented."""
    rest, _, after = completion.partition("\n")
    if rest.strip():
        return ""  # text after the docstring on its line: not a body
    lines = []
    for line in after.split("\n"):
        if line.strip() and not line[:1].isspace():
            break
        lines.append(line)
    return "\n".join(lines).rstrip()


# Runs in the jail as the candidate's own process: the inputs in, one frame of outputs out. Only values of
# plain JSON types (exactly bool, int, float, str, None, lists and dicts of them) come back as values; anything
# else (a tuple, an object with its own __eq__) comes back as its type name and compares unequal.
_CANDIDATE = r"""
import json, os, struct, sys
out = int(sys.argv[1])
os.set_inheritable(out, False)
src, name, inputs = json.loads(sys.stdin.read())
def plain(v, depth=0):
    t = type(v)
    if v is None or t is bool or t is int or t is float or t is str:
        return True
    if depth >= 32:
        return False
    if t is list:
        return all(plain(x, depth + 1) for x in v)
    if t is dict:
        return all(type(k) is str and plain(x, depth + 1) for k, x in v.items())
    return False
ns = {"__name__": "candidate"}
exec(compile(src, "candidate.py", "exec"), ns)
fn = ns[name]
parts = []
for args in inputs:
    try:
        got = fn(*args)
    except Exception as err:
        parts.append(json.dumps({"raised": type(err).__name__[:80]}))
        continue
    try:
        text = json.dumps(got) if plain(got) else None
    except (ValueError, RecursionError):
        text = None
    if text is None or len(text) > 65536:
        parts.append(json.dumps({"opaque": type(got).__name__[:80] if text is None else "too large"}))
    else:
        parts.append('{"value": ' + text + '}')
body = ("[" + ",".join(parts) + "]").encode()
os.write(out, struct.pack(">Q", len(body)) + body)
"""


def _passes(entry: Any, expected: Any) -> bool:
    if not isinstance(entry, dict) or "value" not in entry:
        return False
    got = entry["value"]
    return got == expected or (
        isinstance(expected, float) and isinstance(got, (int, float)) and abs(got - expected) < 1e-6
    )


def run_tests(
    source: str,
    name: str,
    tests: list[tuple[tuple, Any]],
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    sandbox: str = "bwrap",
) -> tuple[int, str | None]:
    """Run `source` on the tests' inputs in the jail (`sandbox: none`: unconfined); (tests passed, error or None).

    Raises SandboxUnavailable when the jail cannot start: the code is never run unconfined by accident.
    """
    confine = sandbox != "none"
    if confine and (reason := unavailable_reason()):
        raise SandboxUnavailable(f"code sandbox: {reason}")
    payload = json.dumps([source, name, [list(a) for a, _ in tests]])
    limits = Limits(
        wall_s=timeout_s, cpu_s=max(1, math.ceil(timeout_s)), memory_mb=memory_mb, memory_total_mb=memory_mb
    )
    out = run_untrusted(_CANDIDATE, payload, limits, confine=confine)
    verdict = out.verdict or {}
    status = verdict.get("exit")
    if out.oom_killed:
        return 0, f"memory limit of {limits.memory_total_mb} MiB exceeded"
    if out.timed_out or verdict.get("timed_out") or status in (-signal.SIGKILL, -signal.SIGXCPU):
        return 0, f"timeout after {timeout_s:g} s"  # the wall clock, or the CPU-time limit before it
    outputs = verdict.get("frame")
    if isinstance(outputs, list) and len(outputs) == len(tests):
        return sum(_passes(o, e) for o, (_, e) in zip(outputs, tests)), None
    if status not in (0, None):
        last = (out.stderr.strip().splitlines() or ["(no output)"])[-1]
        return 0, f"exit {status}: {last[:200]}"
    return 0, verdict.get("problem") or "harness printed no result"


def parses(source: str, name: str) -> bool:
    """Whether `source` parses and defines `name`; any way the parser refuses model output is False (a deep
    expression is a RecursionError, a NUL byte a ValueError on some Pythons), never an exception."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return any(isinstance(n, ast.FunctionDef) and n.name == name for n in tree.body)


# Engines whose server this host starts from a model it holds: only they may run the code suite unconfined.
UNCONFINED_ENGINES = frozenset({"llama.cpp", "llama-server", "vllm", "tensorrt-llm"})


def unconfined_refused(sandbox: str, engine: str | None, base_url: str | None = None) -> str | None:
    """Why `sandbox: none` may not run for `engine` (a hosted endpoint, a bare URL) at `base_url`, or None.

    The engine says whose model writes the code; the URL, when known (at run time), that it is served on
    this host: a label (`tradeoff quality --gguf` says llama.cpp) never makes a remote endpoint local.
    """
    if sandbox != "none":
        return None
    if engine in UNCONFINED_ENGINES:
        host = urlsplit(base_url).hostname if base_url else None
        if base_url is None or is_loopback(host):
            return None
        return (
            f"params.sandbox: 'none' would run code written at {host} (not this host's loopback) unconfined on "
            f"this host; allowed only for a local engine's own server; remove sandbox: none"
        )
    return (
        f"params.sandbox: 'none' would run code written by {f'engine {engine}' if engine else 'a bare endpoint'} "
        f"unconfined on this host; allowed only for {', '.join(sorted(UNCONFINED_ENGINES))}; remove sandbox: none"
    )


# A line at column 0 ends the function body: the completion stops there, not at max_tokens.
BODY_ENDS = ["\ndef ", "\nclass ", "\nif ", "\n#", "\nprint", "\nassert", "\n```", "\n\n\n"]


class CodeParams(SuiteParams):
    tests_per_problem: int = Field(default=5, ge=1, le=100)
    max_tokens: int = Field(default=96, ge=8, le=4096, description="tokens generated per function body")
    timeout_s: float = Field(default=5.0, gt=0, le=60, description="limit on running one function's tests (seconds)")
    num_fewshot: int = Field(default=1, ge=0, le=1, description="the worked example before the problem (0 or 1)")
    sandbox: Literal["bwrap", "none"] = Field(
        default="bwrap", description="bwrap: the jail of tasks.quality.sandbox; none: unconfined (local engines only)"
    )


class Code(Suite):
    name = "code"
    version = "2"  # 2: run in the jail, outputs compared outside (objects with their own __eq__ no longer pass)
    Params = CodeParams

    def run(self, ctx: SuiteContext) -> SuiteResult:
        p = self.params(ctx)
        problem = unconfined_refused(p.sandbox, ctx.engine, ctx.base_url) or (
            p.sandbox == "bwrap" and unavailable_reason()
        )
        if problem:  # before any request: a suite that cannot run its code safely fails with the reason
            raise SandboxUnavailable(problem if p.sandbox == "none" else f"code sandbox: {problem}")
        res = SuiteResult()
        for prob in code_problems(ctx.limit or 20, ctx.seed, p.tests_per_problem):
            prompt = (EXAMPLE if p.num_fewshot else "") + prob.header
            text, error = complete_sample(ctx, prompt, p.max_tokens, stop=BODY_ENDS)
            body = extract_body(text)
            source = prob.header + "\n" + body + "\n"
            ok_syntax = bool(body.strip()) and parses(source, prob.name)
            passed, run_error = (
                run_tests(source, prob.name, prob.tests, p.timeout_s, sandbox=p.sandbox) if ok_syntax else (0, None)
            )
            res.samples.append(
                {
                    "sample_id": prob.id,
                    "prompt": prompt,
                    "target": json.dumps(prob.tests, default=str),
                    "response": text,
                    "score": float(passed == len(prob.tests)),
                    "valid": bool(body.strip()) and error is None,
                    "details": json.dumps(
                        {
                            "function": prob.name,
                            "parses": int(ok_syntax),
                            "tests_passed": passed,
                            "tests": len(prob.tests),
                            "error": error or run_error,
                            "invalid": int(not body.strip() or error is not None),
                        }
                    ),
                }
            )
        n = len(res.samples)
        d = [json.loads(s["details"]) for s in res.samples]
        invalid = sum(x["invalid"] for x in d)
        res.scores = [
            Score(
                "parse_rate", sum(x["parses"] for x in d) / n if n else None, None, n, "fraction", True, "mean(parses)"
            ),
            Score(
                "pass_rate",
                sum(s["score"] for s in res.samples) / n if n else None,
                None,
                n,
                "fraction",
                True,
                "mean(score)",
            ),
            invalid_rate_score(invalid, n, "answers empty or errored"),
        ]
        return res
