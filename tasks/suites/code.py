"""Code validity: small Python functions written from specs; the share that parses and the share that passes.

Each problem is a function header and docstring drawn from a bank of specs with seeded
constants ("Return x plus 7."), with tests computed by a reference implementation. The model
completes the body (greedy, one worked example first). The body is the indented lines that
follow; it is parsed with `ast`, then run against the tests in a separate Python process with
a timeout, memory and CPU limits, no network (sockets disabled before the code runs) and an
empty environment in a temporary folder.
"""

from __future__ import annotations

import ast
import json
import math
import random
import resource
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Any, Callable

import httpx
from pydantic import Field

from tasks.quality import Score, Suite, SuiteContext, SuiteParams, SuiteResult, complete, error_text, register_suite


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
        "add_k": lambda r: (lambda k: ("x", f"Return x plus {k}.", lambda x: x + k, lambda r: tuple(_ints(r, 1))))(const(2, 20)(r)),
        "mul_k": lambda r: (lambda k: ("x", f"Return x multiplied by {k}.", lambda x: x * k, lambda r: tuple(_ints(r, 1))))(const(2, 9)(r)),
        "square": lambda r: ("x", "Return the square of x.", lambda x: x * x, lambda r: tuple(_ints(r, 1))),
        "is_even": lambda r: ("n", "Return True if n is even, otherwise False.", lambda n: n % 2 == 0, lambda r: tuple(_ints(r, 1))),
        "maximum": lambda r: ("xs", "Return the largest number in the non-empty list xs.", max, lambda r: (_ints(r, r.randint(1, 6)),)),
        "minimum": lambda r: ("xs", "Return the smallest number in the non-empty list xs.", min, lambda r: (_ints(r, r.randint(1, 6)),)),
        "sum_list": lambda r: ("xs", "Return the sum of the numbers in the list xs.", sum, lambda r: (_ints(r, r.randint(0, 6)),)),
        "list_length": lambda r: ("xs", "Return the number of elements in the list xs.", len, lambda r: (_ints(r, r.randint(0, 6)),)),
        "reverse_string": lambda r: ("s", "Return the string s reversed.", lambda s: s[::-1], lambda r: (_words(r),)),
        "uppercase": lambda r: ("s", "Return the string s in upper case.", lambda s: s.upper(), lambda r: (_words(r),)),
        "count_words": lambda r: ("s", "Return the number of words in the string s (words are separated by spaces).",
                                  lambda s: len(s.split()), lambda r: (_words(r),)),
        "is_palindrome": lambda r: ("s", "Return True if the string s reads the same forwards and backwards.",
                                    lambda s: s == s[::-1], lambda r: (r.choice(["level", "noon", "radar", "apple", "river", "abba", "abc"]),)),
        "count_vowels": lambda r: ("s", "Return the number of vowels (a, e, i, o, u) in the string s.",
                                   lambda s: sum(c in "aeiou" for c in s), lambda r: (_words(r),)),
        "factorial": lambda r: ("n", "Return n factorial (n! = 1 * 2 * ... * n, and 0! = 1).", math.factorial,
                                lambda r: (r.randint(0, 8),)),
        "fibonacci": lambda r: ("n", "Return the n-th Fibonacci number, with fibonacci(0) = 0 and fibonacci(1) = 1.",
                                lambda n: _fib(n), lambda r: (r.randint(0, 15),)),
        "sum_to_n": lambda r: ("n", "Return the sum of the integers from 1 to n.", lambda n: n * (n + 1) // 2,
                               lambda r: (r.randint(0, 100),)),
        "first_k": lambda r: (lambda k: ("xs", f"Return a list of the first {k} elements of the list xs.",
                                         lambda xs: xs[:k], lambda r: (_ints(r, r.randint(0, 7)),)))(const(1, 4)(r)),
        "repeat_string": lambda r: (lambda k: ("s", f"Return the string s repeated {k} times.", lambda s: s * k,
                                               lambda r: (_words(r),)))(const(2, 4)(r)),
        "clamp": lambda r: (lambda lo, hi: ("x", f"Return x limited to the range from {lo} to {hi}.",
                                            lambda x: max(lo, min(hi, x)), lambda r: tuple(_ints(r, 1, -30, 30))))(
                                                const(-10, 0)(r), const(1, 10)(r)),
        "celsius_to_fahrenheit": lambda r: ("c", "Return the temperature c in degrees Celsius converted to degrees Fahrenheit.",
                                            lambda c: c * 9 / 5 + 32, lambda r: (r.randint(-40, 100),)),
        "remove_spaces": lambda r: ("s", "Return the string s with all spaces removed.", lambda s: s.replace(" ", ""),
                                    lambda r: (_words(r),)),
        "count_positive": lambda r: ("xs", "Return how many numbers in the list xs are greater than zero.",
                                     lambda xs: sum(x > 0 for x in xs), lambda r: (_ints(r, r.randint(0, 7)),)),
        "absolute_difference": lambda r: ("a, b", "Return the absolute difference between a and b.",
                                          lambda a, b: abs(a - b), lambda r: tuple(_ints(r, 2))),
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


_HARNESS = '''
import json, socket, sys
def _no_network(*a, **k):
    raise OSError("network disabled in the code sandbox")
socket.socket = _no_network
socket.create_connection = _no_network
socket.getaddrinfo = _no_network
src, name, tests = json.loads(sys.stdin.read())
ns = {"__name__": "candidate"}
exec(compile(src, "candidate.py", "exec"), ns)
fn = ns[name]
passed = 0
for args, expected in tests:
    try:
        got = fn(*args)
        ok = got == expected or (isinstance(expected, float) and isinstance(got, (int, float)) and abs(got - expected) < 1e-6)
    except Exception:
        ok = False
    passed += bool(ok)
print(json.dumps({"passed": passed}))
'''


def _limits(memory_bytes: int, cpu_s: int) -> Callable[[], None]:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
    return apply


def run_tests(source: str, name: str, tests: list[tuple[tuple, Any]], timeout_s: float = 5.0,
              memory_mb: int = 512) -> tuple[int, str | None]:
    """Run `source` and its tests in a separate, isolated Python process; (tests passed, error or None)."""
    payload = json.dumps([source, name, [[list(a), e] for a, e in tests]])
    with tempfile.TemporaryDirectory(prefix="tradeoff-code-") as cwd:
        try:
            proc = subprocess.run([sys.executable, "-I", "-S", "-c", _HARNESS], input=payload, capture_output=True,
                                  text=True, timeout=timeout_s, cwd=cwd, env={"PATH": "/usr/bin:/bin"},
                                  preexec_fn=_limits(memory_mb << 20, max(1, math.ceil(timeout_s))))
        except subprocess.TimeoutExpired:
            return 0, f"timeout after {timeout_s:g} s"
    if proc.returncode in (-signal.SIGKILL, -signal.SIGXCPU):
        return 0, f"timeout after {timeout_s:g} s"  # the CPU-time limit struck before the wall clock
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        return 0, f"exit {proc.returncode}: {last[:200]}"
    try:
        return int(json.loads(proc.stdout.strip().splitlines()[-1])["passed"]), None
    except (ValueError, KeyError, IndexError):
        return 0, "harness printed no result"


def parses(source: str, name: str) -> bool:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    return any(isinstance(n, ast.FunctionDef) and n.name == name for n in tree.body)


class CodeParams(SuiteParams):
    tests_per_problem: int = Field(default=5, ge=1)
    max_tokens: int = Field(default=96, ge=8, description="tokens generated per function body")
    timeout_s: float = Field(default=5.0, gt=0, description="limit on running one function's tests (seconds)")
    num_fewshot: int = Field(default=1, ge=0, le=1, description="the worked example before the problem (0 or 1)")


@register_suite
class Code(Suite):
    name = "code"
    version = "1"
    Params = CodeParams

    def run(self, ctx: SuiteContext) -> SuiteResult:
        p = self.params(ctx)
        res = SuiteResult()
        for prob in code_problems(ctx.limit or 20, ctx.seed, p.tests_per_problem):
            prompt = (EXAMPLE if p.num_fewshot else "") + prob.header
            try:
                text, error = complete(ctx.base_url, ctx.served_model, prompt, p.max_tokens,
                                       # Lines at column 0 end the body: stop there, not at max_tokens.
                                       stop=["\ndef ", "\nclass ", "\nif ", "\n#", "\nprint", "\nassert", "\n```", "\n\n\n"],
                                       timeout_s=ctx.request_timeout_s), None
            except (httpx.HTTPError, KeyError, ValueError) as err:
                text, error = "", error_text(err)
            body = extract_body(text)
            source = prob.header + "\n" + body + "\n"
            ok_syntax = bool(body.strip()) and parses(source, prob.name)
            passed, run_error = run_tests(source, prob.name, prob.tests, p.timeout_s) if ok_syntax else (0, None)
            res.samples.append({
                "sample_id": prob.id, "prompt": prompt, "target": json.dumps(prob.tests, default=str), "response": text,
                "score": float(passed == len(prob.tests)), "valid": bool(body.strip()) and error is None,
                "details": json.dumps({"function": prob.name, "parses": int(ok_syntax), "tests_passed": passed,
                                       "tests": len(prob.tests), "error": error or run_error,
                                       "invalid": int(not body.strip() or error is not None)})})
        n = len(res.samples)
        d = [json.loads(s["details"]) for s in res.samples]
        invalid = sum(x["invalid"] for x in d)
        res.scores = [
            Score("parse_rate", sum(x["parses"] for x in d) / n if n else None, None, n, "fraction", True, "mean(parses)"),
            Score("pass_rate", sum(s["score"] for s in res.samples) / n if n else None, None, n, "fraction", True,
                  "mean(score)"),
            Score("invalid_rate", invalid / n if n else None, None, n, "fraction", False, "mean(invalid)",
                  note=f"{invalid} of {n} answers empty or errored" if invalid else None),
        ]
        return res
