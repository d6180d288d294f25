"""Request traces: read one (Mooncake JSONL or a plain request log), turn it into prompts of exact token lengths
with the shared prefixes its hash_ids describe, generate one (seeded), and measure how faithfully it was sent.

Formats (one JSON object per line; blank lines skipped; docs/traffic.md):
- Mooncake (FAST'25 traces): {"timestamp": ms, "input_length": tokens, "output_length": tokens,
  "hash_ids": [ids of the prompt's blocks of `block_tokens` tokens]}; two requests that share the first k
  hash_ids share their first k blocks of prompt, so a prefix cache reuses them as in production.
- a plain request log: {"timestamp": ms or ISO-8601 text, "prompt": text | "prompt_tokens": tokens,
  "max_tokens": tokens}.
Both may carry "session_id" with "turn" (1, 2, ...) and "think_time_ms": the turns of a session (a multi-turn
conversation) are sent in order, each no earlier than its timestamp and no earlier than its think time after the
previous turn's answer ended (a user reads the answer before asking again); a generated session's turns share and
grow their context through hash_ids.
Times are replayed relative to the earliest timestamp, divided by the replay speed.

Prompt synthesis: every block of a hash id is the same seeded run of words, each one token with its leading
space (checked against the tokenizer, which drops words it splits), so a prompt of n words is n tokens and
prompts sharing hash ids share their token prefix. Without a tokenizer the lengths are in words and say so
(`approx_words`), as the synthetic workload's.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, fields, replace
from datetime import datetime
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from tasks.core.config import MAX_STEP_S, PerfSpec, TraceSpec
from tasks.core.errors import ConfigError
from tasks.perf.workload import WORDS, Prompt

MAX_TRACE_LINES = 100_000
MAX_TRACE_BYTES = 256 << 20
MAX_INPUT_TOKENS = 1_048_576
MAX_OUTPUT_TOKENS = 131_072
MAX_HASH_IDS = 65_536
MOONCAKE_FIX = (
    'each line is {"timestamp": ms, "input_length": tokens, "output_length": tokens, "hash_ids": [...]} '
    '(Mooncake) or {"timestamp": ms, "prompt": text or "prompt_tokens": tokens, "max_tokens": tokens}'
)


@dataclass(frozen=True)
class TraceRequest:
    """One request of a trace: when (ms from the trace's first request) and what."""

    at_ms: float
    output_tokens: int
    input_tokens: int | None = None  # None: `prompt` gives the text
    prompt: str | None = None
    hash_ids: tuple[int, ...] = ()
    session_id: str | None = None
    line: int = 0  # 1-based line in the file
    turn: int | None = None  # depth in its session (1-based); None: not in a session
    think_ms: float = 0.0  # least time after the previous turn's answer before this turn is sent


def _int_field(obj: dict, key: str, where: str, least: int, most: int) -> int:
    v = obj.get(key)
    if v is None:
        raise ConfigError(f"{where}: field '{key}' is missing; {MOONCAKE_FIX}")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not float(v).is_integer():
        raise ConfigError(f"{where}: field '{key}' is {v!r}, not a whole number of tokens; {MOONCAKE_FIX}")
    if not least <= int(v) <= most:
        raise ConfigError(f"{where}: field '{key}' is {int(v)}, outside {least}..{most}; fix or drop the line")
    return int(v)


def _timestamp_ms(obj: dict, where: str) -> float:
    v = obj.get("timestamp")
    if v is None:
        raise ConfigError(f"{where}: field 'timestamp' is missing; {MOONCAKE_FIX}")
    if isinstance(v, str):
        try:
            return datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp() * 1000.0
        except ValueError:
            raise ConfigError(
                f"{where}: field 'timestamp' is {v[:40]!r}, neither ms nor ISO-8601; give ms as a number"
            ) from None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise ConfigError(f"{where}: field 'timestamp' is {v!r}, not a time in ms >= 0; {MOONCAKE_FIX}")
    return float(v)


def parse_line(obj: object, where: str, line: int) -> TraceRequest:
    """One trace line, either format; ConfigError naming the line and field on anything else."""
    if not isinstance(obj, dict):
        raise ConfigError(f"{where}: a JSON {type(obj).__name__}, not an object; {MOONCAKE_FIX}")
    at = _timestamp_ms(obj, where)
    session = obj.get("session_id")
    session = None if session is None else str(session)[:200]
    turn = _int_field(obj, "turn", where, 1, 100_000) if "turn" in obj else (1 if session is not None else None)
    think = obj.get("think_time_ms", 0)
    if isinstance(think, bool) or not isinstance(think, (int, float)) or not 0 <= think <= 86_400_000:
        raise ConfigError(f"{where}: field 'think_time_ms' is {think!r}, not ms in 0..86400000; fix or drop it")
    more = {"session_id": session, "line": line, "turn": turn, "think_ms": float(think)}
    if "input_length" in obj or "output_length" in obj:
        hash_ids = obj.get("hash_ids", [])
        if not isinstance(hash_ids, list) or len(hash_ids) > MAX_HASH_IDS:
            raise ConfigError(f"{where}: field 'hash_ids' is not a list of at most {MAX_HASH_IDS} ids; {MOONCAKE_FIX}")
        if any(isinstance(h, bool) or not isinstance(h, int) for h in hash_ids):
            raise ConfigError(f"{where}: field 'hash_ids' holds a non-integer; give block ids as integers")
        return TraceRequest(
            at,
            _int_field(obj, "output_length", where, 1, MAX_OUTPUT_TOKENS),
            _int_field(obj, "input_length", where, 1, MAX_INPUT_TOKENS),
            hash_ids=tuple(hash_ids),
            **more,
        )
    out = _int_field(obj, "max_tokens", where, 1, MAX_OUTPUT_TOKENS)
    if isinstance(obj.get("prompt"), str) and obj["prompt"]:
        return TraceRequest(at, out, prompt=obj["prompt"], **more)
    if "prompt" in obj:
        raise ConfigError(f"{where}: field 'prompt' is not a non-empty string; give the prompt's text")
    if "prompt_tokens" not in obj:
        raise ConfigError(f"{where}: neither 'prompt' nor 'prompt_tokens' (nor 'input_length'); {MOONCAKE_FIX}")
    return TraceRequest(at, out, _int_field(obj, "prompt_tokens", where, 1, MAX_INPUT_TOKENS), **more)


def load_trace(path: str | Path, field: str = "perf.trace", max_requests: int | None = None) -> list[TraceRequest]:
    """The trace's requests in send order, times from the first one (ms); ConfigError with the line on bad input."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{field}: file {p} not found; give a JSONL trace (`tradeoff trace` generates one)")
    if p.stat().st_size > MAX_TRACE_BYTES:
        raise ConfigError(f"{field}: {p} is over {MAX_TRACE_BYTES >> 20} MiB; cut the trace")
    try:
        out = _read_lines(p, field, max_requests)
    except UnicodeDecodeError as err:
        raise ConfigError(f"{field}: {p} is not UTF-8 text (byte {err.start}); give a JSONL trace") from None
    if not out:
        raise ConfigError(f"{field}: {p} holds no request; {MOONCAKE_FIX}")
    out.sort(key=lambda r: (r.at_ms, r.turn or 0))  # a log written out of order is replayed in time order
    t0 = out[0].at_ms
    return [replace(r, at_ms=r.at_ms - t0) for r in out]


def _read_lines(p: Path, field: str, max_requests: int | None) -> list[TraceRequest]:
    out: list[TraceRequest] = []
    with p.open(encoding="utf-8", errors="strict") as f:
        for n, text in enumerate(f, 1):
            if not text.strip():
                continue
            where = f"{field}: {p.name} line {n}"
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as err:
                raise ConfigError(f"{where}: not JSON ({err.msg}); {MOONCAKE_FIX}") from None
            except RecursionError:
                raise ConfigError(f"{where}: JSON nested too deep; {MOONCAKE_FIX}") from None
            out.append(parse_line(obj, where, n))
            if len(out) > MAX_TRACE_LINES:
                raise ConfigError(f"{field}: {p} has over {MAX_TRACE_LINES:,} requests; cut it or set max_requests")
            if max_requests and len(out) >= max_requests:
                break
    return out


def single_token_words(count: Callable[[str], int] | None) -> list[str]:
    """Words that are one token each with their leading space (all of WORDS without a tokenizer)."""
    if count is None:
        return list(WORDS)
    words = [w for w in WORDS if count(" " + w) == 1 and count(" " + w + " " + w) == 2]
    if len(words) < 16:
        raise ConfigError("perf.trace: the tokenizer splits the common words into pieces; no exact lengths possible")
    return words


def _words(rng: random.Random, vocab: Sequence[str], n: int) -> list[str]:
    return [vocab[rng.randrange(len(vocab))] for _ in range(n)]


def trace_prompts(
    requests: Sequence[TraceRequest],
    spec: TraceSpec,
    seed: int | str,
    count_tokens: Callable[[str], int] | None = None,
) -> list[Prompt]:
    """The trace's requests as prompts, each with its send time (s, scaled by the replay speed) and output length.

    Blocks of a hash id are the same words in every request (seeded by `seed` and the id); the rest of a prompt
    past its hash_ids is its own (seeded by its position), so no two requests share more than their hash_ids.
    """
    vocab = single_token_words(count_tokens)
    source = "tokenizer" if count_tokens else "approx_words"
    blocks: dict[int, list[str]] = {}
    last_turn: dict[str, int] = {}  # session -> index of its latest turn so far
    out = []
    for i, r in enumerate(requests):
        at_s = r.at_ms / 1000.0 / spec.speed
        session = {}
        if r.session_id is not None:
            after = last_turn.get(r.session_id)
            last_turn[r.session_id] = i
            session = {"session_id": r.session_id, "turn": r.turn, "after": after, "think_s": r.think_ms / 1000.0}
        if r.prompt is not None:
            n = count_tokens(r.prompt) if count_tokens else len(r.prompt.split())
            out.append(Prompt(r.prompt, n, r.output_tokens, source, at_s=at_s, **session))
            continue
        words: list[str] = []
        for h in r.hash_ids:
            if len(words) >= r.input_tokens:
                break
            if h not in blocks:
                blocks[h] = _words(random.Random(f"{seed}:block:{h}"), vocab, spec.block_tokens)
            words += blocks[h]
        words = words[: r.input_tokens]
        words += _words(random.Random(f"{seed}:request:{i}"), vocab, r.input_tokens - len(words))
        text = "".join(" " + w for w in words)
        n = count_tokens(text) if count_tokens else len(words)
        out.append(Prompt(text, n, r.output_tokens, source, at_s=at_s, **session))
    return out


def trace_replays(
    spec: PerfSpec, count_tokens: Callable[[str], int] | None = None, warn: Callable[[str], None] | None = None
) -> Callable[[int, int], list[Prompt]]:
    """perf.trace's prompts for each replay and window ((replay, window) -> prompts, built once each; window > 0: the
    replay measured again). Replay 0's first window is seeded by perf.seed; any other by perf.seed, the replay and
    the window, so its blocks are other words in the same shape: within a replay
    the requests share their hash_ids' prefixes as the trace says, across replays none, so a replay is not served
    from the prompt cache the one before filled (on 2026-12-06 the demo's second and third replays had a p50 TTFT
    of 21 ms against 255-385 ms for the first: cache hits, which the SLO claim then read as correlated requests).
    Prompts the trace gives verbatim are sent as given in every replay: the cache may serve those. A replay past
    the step's bound is refused, one cut by perf.max_duration_s is `warn`ed of (trace_span_note)."""
    assert spec.trace is not None
    requests = load_trace(spec.trace.path, max_requests=spec.trace.max_requests)
    cut = trace_span_note(requests, spec.trace, spec.max_duration_s)  # never waits out a trace past its bound
    if cut and warn:
        warn(cut)
    made: dict[tuple[int, int], list[Prompt]] = {}

    def replay(k: int, window: int = 0) -> list[Prompt]:
        if (k, window) not in made:
            seed = spec.seed if (k, window) == (0, 0) else f"{spec.seed}/{k}" + (f"/{window}" if window else "")
            made[(k, window)] = trace_prompts(requests, spec.trace, seed, count_tokens)
        return made[(k, window)]

    return replay


def trace_duration_s(requests: Sequence[TraceRequest], speed: float = 1.0) -> float:
    """Seconds from the first send to the last, at `speed`."""
    return (requests[-1].at_ms - requests[0].at_ms) / 1000.0 / speed if requests else 0.0


def session_think_s(requests: Sequence[TraceRequest]) -> float:
    """The longest total think time of one session (s): its turns after the first wait at least that long between
    them, whatever the replay speed (a think time is a user reading an answer, not a timestamp)."""
    totals: dict[str, float] = {}
    for r in requests:  # in send order: a session's first turn waits for no answer
        if r.session_id is not None:
            totals[r.session_id] = totals[r.session_id] + r.think_ms / 1000.0 if r.session_id in totals else 0.0
    return max(totals.values(), default=0.0)


def _span_words(s: float) -> str:
    years = s / (365.25 * 86_400)
    return f"{s:,.0f} s" + (f" ({years:,.0f} years)" if years >= 1 else f" ({s / 3600:,.1f} h)" if s >= 3600 else "")


def trace_span_note(
    requests: Sequence[TraceRequest], trace: TraceSpec, max_duration_s: float | None, field: str = "perf.trace"
) -> str | None:
    """A replay's span against the step's bound, before any request: ConfigError (one line: the span and the bound)
    where the replay would run past a day with no perf.max_duration_s set; where max_duration_s is set and shorter,
    the note that it cuts the replay there (requests due later are not sent); else None."""
    span = trace_duration_s(requests, trace.speed)
    think = session_think_s(requests)
    what = (
        f"its requests span {_span_words(span)} at speed {trace.speed:g}"
        if span >= think
        else f"a session's think times add up to {_span_words(think)}"
    )
    longest = max(span, think)
    flag = field.startswith("--")  # `tradeoff perf --trace`: its flags, else the config's keys
    speed, most, cut = (
        ("--trace-speed", "--trace-max-requests", "--max-duration-s")
        if flag
        else (f"{field}.speed", f"{field}.max_requests", "perf.max_duration_s")
    )
    if max_duration_s is None and longest > MAX_STEP_S:
        raise ConfigError(
            f"{field}: {what}, over a step's bound of {MAX_STEP_S:,.0f} s; cut the trace, raise {speed}, set {most}, "
            f"or set {cut} (the replay is then cut there)"
        )
    if max_duration_s is not None and longest > max_duration_s:
        return f"trace: {what}; {cut} cuts each replay at {max_duration_s:g} s (requests due later are not sent)"
    return None


def send_error_stats(errors_ms: Sequence[float]) -> dict[str, float | None]:
    """p50, p99 and max of the send-time errors (actual send - scheduled send, ms); None without any."""
    arr = np.asarray([e for e in errors_ms if e is not None], dtype=float)
    if arr.size == 0:
        return {"send_error_ms_p50": None, "send_error_ms_p99": None, "send_error_ms_max": None}
    p50, p99 = np.percentile(arr, [50, 99])
    return {"send_error_ms_p50": float(p50), "send_error_ms_p99": float(p99), "send_error_ms_max": float(arr.max())}


@dataclass(frozen=True)
class TraceShape:
    """What `generate_trace` draws: a diurnal rate with bursts, long-tailed lengths, prefix groups."""

    duration_s: float = 60.0
    rate: float = 1.0  # mean requests/s before bursts
    diurnal_amplitude: float = 0.5  # rate x (1 + a sin(2 pi t / period))
    period_s: float | None = None  # default: the duration (one "day")
    bursts: int = 2  # bursts of `burst_factor` x the rate, `burst_s` long, at seeded times
    burst_factor: float = 4.0
    burst_s: float = 3.0
    input_median: int = 128  # log-normal lengths: median, sigma, clipped to [min, max]
    input_sigma: float = 0.6
    output_median: int = 32
    output_sigma: float = 0.5
    min_len: int = 4
    max_input: int = 1024
    max_output: int = 256
    prefix_groups: int = 3  # shared system prompts: a request uses one with `prefix_share`
    prefix_share: float = 0.6
    prefix_blocks: int = 4  # blocks of a group's shared prefix
    block_tokens: int = 16
    sessions: float = 0.0  # share of arrivals that start a multi-turn session (its first turn is the arrival)
    turns_mean: float = 3.0  # mean turns of a session (1 + geometric)
    think_s: float = 3.0  # a user's think time between an answer and the next turn (s)
    turn_input_median: int = 24  # new tokens a later turn adds to the context (log-normal, input_sigma)


def _lognormal(rng: np.random.Generator, median: int, sigma: float, least: int, most: int) -> int:
    return int(np.clip(round(median * math.exp(sigma * rng.standard_normal())), least, most))


def generate_trace(shape: TraceShape, seed: int = 0) -> list[dict]:
    """A seeded Mooncake-format trace (list of line objects): a non-homogeneous Poisson stream (thinning) of
    rate(t) = rate (1 + a sin(2 pi t / period)), times burst_factor inside bursts; log-normal lengths; a request
    in a prefix group starts with its group's blocks (at most the blocks its prompt fills)."""
    rng = np.random.default_rng(seed)
    period = shape.period_s or shape.duration_s
    starts = sorted(rng.uniform(0, max(shape.duration_s - shape.burst_s, 0), size=shape.bursts).tolist())

    def rate_at(t: float) -> float:
        r = shape.rate * (1 + shape.diurnal_amplitude * math.sin(2 * math.pi * t / period))
        return r * (shape.burst_factor if any(s <= t < s + shape.burst_s for s in starts) else 1.0)

    peak = shape.rate * (1 + abs(shape.diurnal_amplitude)) * max(shape.burst_factor, 1.0)
    lines, t, next_id = [], 0.0, shape.prefix_groups * shape.prefix_blocks
    while True:
        t += rng.exponential(1.0 / peak)
        if t >= shape.duration_s:
            break
        if rng.uniform() * peak > rate_at(t):
            continue  # thinned: the rate here is below the peak
        n_in = _lognormal(rng, shape.input_median, shape.input_sigma, shape.min_len, shape.max_input)
        n_out = _lognormal(rng, shape.output_median, shape.output_sigma, shape.min_len, shape.max_output)
        n_blocks = math.ceil(n_in / shape.block_tokens)
        ids: list[int] = []
        if shape.prefix_groups and rng.uniform() < shape.prefix_share:
            g = int(rng.integers(shape.prefix_groups))
            ids = list(range(g * shape.prefix_blocks, (g + 1) * shape.prefix_blocks))[:n_blocks]
        own = n_blocks - len(ids)  # the request's own blocks, ids no other request uses
        ids += list(range(next_id, next_id + own))
        next_id += own
        line = {"timestamp": int(round(t * 1000)), "input_length": n_in, "output_length": n_out, "hash_ids": ids}
        lines.append(line)
        if shape.sessions and rng.uniform() < shape.sessions:
            next_id = _session(rng, shape, line, f"s{len(lines)}", next_id, lines)
    return sorted(lines, key=lambda x: (x["timestamp"], x.get("turn", 0)))


def _session(rng: np.random.Generator, shape: TraceShape, first: dict, sid: str, next_id: int, lines: list) -> int:
    """The later turns of a session that `first` opens (appended to `lines`): each turn's prompt is the previous
    prompt, its answer and new text, so its hash_ids repeat the previous turn's full blocks; its timestamp is
    `think_s` after the previous one's (the replay also waits for the previous answer). Returns the next free id."""
    first.update(session_id=sid, turn=1)
    turns = 1 + int(rng.geometric(1.0 / max(shape.turns_mean, 1.0))) - 1
    prev = first
    for k in range(2, turns + 1):
        new = _lognormal(rng, shape.turn_input_median, shape.input_sigma, 1, shape.max_input)
        n_in = min(prev["input_length"] + prev["output_length"] + new, MAX_INPUT_TOKENS)
        kept = prev["hash_ids"][: prev["input_length"] // shape.block_tokens]  # the previous prompt's full blocks
        own = math.ceil(n_in / shape.block_tokens) - len(kept)
        n_out = _lognormal(rng, shape.output_median, shape.output_sigma, shape.min_len, shape.max_output)
        prev = {
            "timestamp": prev["timestamp"] + int(round(shape.think_s * 1000)),
            "input_length": n_in,
            "output_length": n_out,
            "hash_ids": kept + list(range(next_id, next_id + own)),
            "session_id": sid,
            "turn": k,
            "think_time_ms": int(round(shape.think_s * 1000)),
        }
        next_id += own
        lines.append(prev)
    return next_id


def write_trace(lines: Sequence[dict], path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return p


def add_arguments(p) -> None:
    """The `tradeoff trace` flags: TraceShape's fields, with its defaults."""
    p.add_argument("--output", required=True, help="JSONL file to write")
    p.add_argument("--seed", type=int, default=0)
    for f in fields(TraceShape):
        kind = float if f.type in ("float", "float | None") else int
        p.add_argument(f"--{f.name.replace('_', '-')}", type=kind, default=f.default, help=f"default {f.default}")


def shape_from_args(args) -> TraceShape:
    """The flags as a TraceShape; ConfigError naming the flag when a value is out of range."""
    shape = TraceShape(**{f.name: getattr(args, f.name) for f in fields(TraceShape)})
    problems = [
        ("--duration-s", not 0 < shape.duration_s <= 86_400, "give 0 < seconds <= 86400"),
        ("--rate", not 0 < shape.rate <= 1_000, "give 0 < requests/s <= 1000"),
        ("--diurnal-amplitude", not 0 <= shape.diurnal_amplitude < 1, "give 0 <= a < 1"),
        ("--bursts", shape.bursts < 0, "give 0 or more"),
        ("--burst-factor", shape.burst_factor < 1, "give a factor >= 1"),
        ("--min-len", not 1 <= shape.min_len <= min(shape.max_input, shape.max_output), "give 1 <= it <= the maxima"),
        ("--max-input", shape.max_input > MAX_INPUT_TOKENS, f"give at most {MAX_INPUT_TOKENS}"),
        ("--max-output", shape.max_output > MAX_OUTPUT_TOKENS, f"give at most {MAX_OUTPUT_TOKENS}"),
        ("--prefix-share", not 0 <= shape.prefix_share <= 1, "give a share between 0 and 1"),
        ("--block-tokens", shape.block_tokens < 1, "give 1 or more"),
        ("--prefix-groups", shape.prefix_groups < 0, "give 0 or more"),
        ("--sessions", not 0 <= shape.sessions <= 1, "give a share between 0 and 1"),
        ("--turns-mean", not 1 <= shape.turns_mean <= 100, "give 1 to 100 turns"),
        ("--think-s", not 0 <= shape.think_s <= 3_600, "give 0 to 3600 s"),
        ("--turn-input-median", shape.turn_input_median < 1, "give 1 or more"),
    ]
    for flag, bad, fix in problems:
        if bad:
            raise ConfigError(f"{flag}: {getattr(args, flag[2:].replace('-', '_'))} is out of range; {fix}")
    if shape.duration_s * shape.rate * (1 + shape.diurnal_amplitude) * shape.burst_factor > MAX_TRACE_LINES:
        raise ConfigError(f"--rate x --duration-s: over {MAX_TRACE_LINES:,} requests; lower one of them")
    return shape


def trace_line(lines: Sequence[dict], path: str | Path) -> str:
    """What a written trace holds, in one line."""
    if not lines:
        return f"wrote {path}: no request (raise --rate or --duration-s)"
    n_in = [x["input_length"] for x in lines]
    n_out = [x["output_length"] for x in lines]
    span_s = lines[-1]["timestamp"] / 1000.0
    return (
        f"wrote {path}: {len(lines)} requests over {span_s:.1f} s ({len(lines) / max(span_s, 1e-9):.2f} req/s), "
        f"input tokens median {int(np.median(n_in))} (max {max(n_in)}), output median {int(np.median(n_out))} "
        f"(max {max(n_out)})"
    )
