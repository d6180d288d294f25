"""Workloads: synthetic prompts (seeded, unique starts) or a ShareGPT file, per (step, repeat)."""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tasks.core.config import PerfSpec
from tasks.core.errors import ConfigError

WORDS = (
    "time year people way day man thing woman life child world school state family student group "
    "country problem hand part place case week company system program question work government number "
    "night point home water room mother area money story fact month lot right study book eye job word "
    "business issue side kind head house service friend father power hour game line end member law car "
    "city community name president team minute idea kid body information back parent face others level "
    "office door health person art war history party result change morning reason research girl guy "
    "moment air teacher force education river garden window paper music market light voice table road"
).split()


@dataclass
class Prompt:
    text: str
    tokens: int | None  # prompt tokens; None when unknown
    output_len: int | None = None  # output tokens to ask for; None: the step's default
    tokens_source: str | None = None  # tokenizer | approx_words
    at_s: float | None = None  # a trace's send time (s from the step's start); None: the step's schedule
    session_id: str | None = None  # a trace's session (multi-turn conversation); None: none
    turn: int | None = None  # depth in the session, 1-based
    after: int | None = None  # index (in the step's prompts) of the session's previous turn: sent after it returns
    think_s: float = 0.0  # least time between the previous turn's return and this one's send


def _spread(rng: random.Random, length: int, spread: float, least: int) -> int:
    """A length drawn uniformly in [length*(1-spread), length*(1+spread)], at least `least`."""
    if spread <= 0:
        return length
    return max(least, rng.randint(int(length * (1 - spread)), int(math.ceil(length * (1 + spread)))))


def exact_length(
    ids: list[int], n: int, encode: Callable[[str], list[int]], decode: Callable[[list[int]], str], tries: int = 10
) -> tuple[str, int]:
    """A text whose own tokenization is `n` tokens, from the ids of a longer one: cut to n, decoded, and since a decoded
    text may tokenize to other ids (merges across the cut, a split character), encoded again and cut or topped up
    with the text's own following ids until it holds, as vLLM's random dataset does (gen_prompt_decode_to_target_len).
    Returns the text and its length by `encode` (n, or the nearest after `tries`)."""
    spare = ids[n:]
    ids = ids[:n]
    text = decode(ids)
    for _ in range(tries):
        again = encode(text)
        if len(again) == n:
            return text, n
        ids = again[:n] if len(again) > n else again + spare[: n - len(again)]
        text = decode(ids)
    return text, len(encode(text))


def synthetic_prompts(
    n: int,
    input_len: int,
    seed: int,
    unique: bool = True,
    encode: Callable[[str], list[int]] | None = None,
    decode: Callable[[list[int]], str] | None = None,
    output_len: int | None = None,
    len_spread: float = 0.0,
) -> list[Prompt]:
    """`n` seeded prompts of `input_len` tokens of common words (each length spread by `len_spread`).

    With `unique`, each prompt starts with its own index and nonce so that no prefix
    cache can reuse another request's prompt; without, all prompts are the same text
    (to measure prefix caching on purpose). Without a tokenizer the length is approximate
    (one word ~ one token) and says so in `tokens_source`.
    """
    rng = random.Random(seed)
    longest = int(math.ceil(input_len * (1 + len_spread))) + 1
    body_words = [rng.choice(WORDS) for _ in range(longest * 2)]
    out = []
    for i in range(n):
        n_in = _spread(rng, input_len, len_spread, 1)
        n_out = _spread(rng, output_len, len_spread, 2) if output_len else None
        head = f"Request {i} nonce {rng.getrandbits(32):08x}: " if unique else ""
        if unique:
            rng.shuffle(body_words)
        text = head + " ".join(body_words)
        if encode and decode:
            text, n_tok = exact_length(encode(text), n_in, encode, decode)
            out.append(Prompt(text, n_tok, n_out, "tokenizer"))
        else:
            words = (head + " ".join(body_words)).split()[: max(1, n_in)]
            out.append(Prompt(" ".join(words), len(words), n_out, "approx_words"))
    return out


def load_sharegpt(
    path: str | Path, n: int, seed: int, count_tokens: Callable[[str], int] | None = None, output_len: int | None = None
) -> list[Prompt]:
    """`n` prompts from a ShareGPT-format JSON file, chosen as `vllm bench serve` chooses them.

    The file is a list of {"conversations": [{"from": "human", "value": ...}, {"from": "gpt",
    "value": ...}, ...]}. As in vLLM: entries with fewer than two turns are dropped, the
    rest shuffled with `seed` (the same order as vLLM's for the same seed), the first turn
    is the prompt and the second's token count the output length unless `output_len` is
    given; prompts under 4 or over 1024 tokens, outputs under 4 (when not fixed) and pairs
    over 2048 are skipped. Too few left: they are reused in order.
    """
    p = Path(path)
    fix = 'give a ShareGPT JSON file: a list of {"conversations": [{"from": ..., "value": ...}, ...]}'
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"perf.dataset: file {p} not found; {fix}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ConfigError(f"perf.dataset: {p} is not JSON ({type(err).__name__}); {fix}") from None
    if not isinstance(data, list):
        raise ConfigError(f"perf.dataset: {p} holds a {type(data).__name__}, not a list; {fix}")
    data = [
        e
        for e in data
        if isinstance(e, dict) and isinstance(e.get("conversations"), list) and len(e["conversations"]) >= 2
    ]
    random.Random(seed).shuffle(data)
    count, source = (count_tokens, "tokenizer") if count_tokens else ((lambda t: len(t.split())), "approx_words")
    out: list[Prompt] = []
    for entry in data:
        if len(out) >= n:
            break
        prompt, completion = (str(entry["conversations"][i].get("value", "")) for i in (0, 1))
        n_in = count(prompt)
        n_out = output_len if output_len is not None else count(completion)
        if n_in < 4 or n_in > 1024 or n_in + n_out > 2048 or (output_len is None and n_out < 4):
            continue
        out.append(Prompt(prompt, n_in, max(1, n_out), source))
    if not out:
        raise ConfigError(f"perf.dataset: {p} has no usable conversation (4..1024 prompt tokens); {fix}")
    return [out[i % len(out)] for i in range(n)]


Workload = Callable[..., list[Prompt]]  # (seed, n[, fixed_length]) -> prompts


def make_workload(
    spec: PerfSpec,
    encode: Callable[[str], list[int]] | None = None,
    decode: Callable[[list[int]], str] | None = None,
    count_tokens: Callable[[str], int] | None = None,
) -> Workload:
    """Prompts for each (step, repeat): synthetic (seeded, unique starts) or from the ShareGPT file.

    From a file, output lengths are the dataset's unless `output_len` was set explicitly
    (as vLLM's --sharegpt-output-len); every (step, repeat) sends the same file prompts.
    `fixed_length` (the jitter scenario) asks for synthetic prompts of exactly `input_len`
    tokens asking for `output_len`, whatever the spread or dataset.
    """

    def fixed(seed: int, n: int) -> list[Prompt]:
        return synthetic_prompts(n, spec.input_len, seed, spec.unique_prompts, encode, decode, spec.output_len, 0.0)

    if spec.dataset:
        fixed_out = spec.output_len if "output_len" in spec.model_fields_set else None
        cache: dict[int, list[Prompt]] = {}

        def from_file(seed: int, n: int, fixed_length: bool = False) -> list[Prompt]:
            if fixed_length:
                return fixed(seed, n)
            if n not in cache:
                cache[n] = load_sharegpt(spec.dataset, n, spec.seed, count_tokens, fixed_out)
            return cache[n]

        return from_file

    def synthetic(seed: int, n: int, fixed_length: bool = False) -> list[Prompt]:
        if fixed_length:
            return fixed(seed, n)
        return synthetic_prompts(
            n, spec.input_len, seed, spec.unique_prompts, encode, decode, spec.output_len, spec.len_spread
        )

    return synthetic
