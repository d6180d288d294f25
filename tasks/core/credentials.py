"""API keys and the endpoints they go to: where a key may come from, where it may be sent, what of it may be shown.

- A hosted variant's key comes from an environment variable whose name the operator allowed
  (`TRADEOFF_*` or `*_API_KEY` by default; `TRADEOFF_API_KEY_ENV_ALLOW`, comma-separated glob
  patterns, replaces that list - an operator's setting, never a config's), or from a Prefect
  Secret block. A value that is not such a name is refused without being shown: it may be a key
  pasted in the wrong place.
- A key goes only to the hosts the operator bound it to: `TRADEOFF_KEY_HOSTS` (an environment variable,
  never a config field or a flow parameter) lists `SOURCE=HOST[,HOST...]` entries, SOURCE being the
  variable's name or `secret:<block>`, HOST a host name or `*.domain` (its subdomains); loopback hosts
  need no binding. A config (or a `variant` flow parameter) that would send a key elsewhere fails when
  it loads, naming the field and the binding to add.
- `base_url` must be https, unless its host is loopback (127.0.0.0/8, ::1, localhost); a URL
  holding credentials (user:password@), a query string or a fragment is refused, unshown.
- lm-eval `model_args` that would weaken this (send requests or tokens elsewhere, turn TLS
  checks off, load code or tokenizers from the hub) are refused when the config loads.
- Error texts kept from servers (perf_requests.error) are cut to a short excerpt with keys
  and key-like tokens replaced.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import os
import re
from typing import Any
from urllib.parse import urlsplit

KEY_ENV_ALLOW_VAR = "TRADEOFF_API_KEY_ENV_ALLOW"
KEY_HOSTS_VAR = "TRADEOFF_KEY_HOSTS"
_HOST = re.compile(r"(\*\.)?[a-z0-9]([a-z0-9-]{0,62})(\.[a-z0-9]([a-z0-9-]{0,62}))*")
DEFAULT_KEY_ENV_PATTERNS = ("TRADEOFF_*", "*_API_KEY")
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,127}")
_BLOCK_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,99}")  # Prefect block names: lowercase letters, digits, dashes
ERROR_EXCERPT_CHARS = 160

# lm-eval 0.4.13's API model classes (TemplateAPI, LocalCompletionsAPI, LocalChatCompletion and
# tradeoff-llama-cpp) take these keyword arguments; from a config they would weaken what tradeoff guarantees.
LMEVAL_REFUSED_ARGS = {
    "base_url": "tradeoff sends the requests to the variant's endpoint; another URL would get them and the key",
    "header": "it replaces the Authorization header tradeoff sets, or adds headers the endpoint would receive",
    "auth_token": "lm-eval sends it to the endpoint's /tokenize (remote tokenizer); keys come from the variant",
    "trust_remote_code": "it runs code from the hub",
    "verify_certificate": "it turns TLS certificate checks off",
    "ca_cert_path": "it trusts another certificate authority",
    "gguf": "tradeoff passes the variant's own GGUF",
}
# tokenizer_backend: a Hugging Face tokenizer (`tokenizer`: hub name or folder, loaded without remote code) or
# none; 'remote' and 'auto' send tokenization requests with their own token and certificate settings, 'tiktoken'
# fetches OpenAI's encodings from the internet.
LMEVAL_TOKENIZER_BACKENDS = (None, "none", "None", "huggingface")
# Set by tradeoff itself (a second value would be a TypeError at run time): the suite's own params say them.
LMEVAL_OWN_ARGS = {
    "model": "the variant's served model",
    "pretrained": "the variant's served model",
    "num_concurrent": "params.concurrency",
    "timeout": "params.timeout_s",
    "tokenized_requests": "tradeoff's choice",
    "loglikelihood": "params.loglikelihood",
    "n_ctx": "the model's max_context",
}
_CREDENTIAL_WORDS = re.compile(
    r"(^|_)(api_?key|key|token|secret|passw(or)?d|auth|cookie|credentials?)($|_)", re.IGNORECASE
)


def key_env_patterns() -> list[str]:
    """Glob patterns of the environment variables that may hold an API key (the operator's setting, else default)."""
    given = os.environ.get(KEY_ENV_ALLOW_VAR)
    if given is None:
        return list(DEFAULT_KEY_ENV_PATTERNS)
    return [p.strip() for p in given.split(",") if p.strip()]


def key_env_problem(name: Any) -> str | None:
    """Why `name` may not be read as an API key's environment variable, never showing it; None when it may."""
    if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
        return (
            "engine_args.api_key_env: the value is not an environment variable name (upper-case letters, digits, "
            "'_'); it is not shown, as it may be a key: export the key, e.g. as OPENAI_API_KEY, and name that variable"
        )
    patterns = key_env_patterns()
    if not any(fnmatch.fnmatchcase(name, p) for p in patterns):
        return (
            f"engine_args.api_key_env: that variable is not allowed to hold an API key (name not shown); allowed: "
            f"{', '.join(patterns) or 'none'} (the operator sets {KEY_ENV_ALLOW_VAR}), or use api_key_secret"
        )
    return None


def secret_block_problem(name: Any) -> str | None:
    if isinstance(name, str) and _BLOCK_NAME.fullmatch(name):
        return None
    return (
        "engine_args.api_key_secret: the value is not a Prefect block name (lowercase letters, digits, '-'); it is "
        "not shown, as it may be a key: save the key as a Secret block and name the block"
    )


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def url_problem(url: Any, field: str = "engine_args.base_url") -> str | None:
    """Why `url` may not receive requests with a key: credentials or query in it (unshown), plain http off loopback."""
    if not isinstance(url, str):
        return None  # the options model says what type it wants
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        return f"{field}: not a URL (not shown); write https://host[:port]"
    if "@" in parts.netloc:
        return (
            f"{field}: a URL with credentials (user:password@) is refused and not shown; "
            f"give the key with api_key_env or api_key_secret"
        )
    if parts.query or parts.fragment:
        return (
            f"{field}: a URL with a query string or fragment is refused and not shown (it may hold a key); give "
            f"the server root"
        )
    if parts.scheme not in ("http", "https") or not host:
        return f"{field}: must be an http(s) URL with a host, e.g. https://api.example.com"
    if parts.scheme == "http" and not is_loopback(host):
        return (
            f"{field}: plain http to {host} would send requests and the API key in clear; use https:// "
            f"(http only for loopback: 127.0.0.1, ::1, localhost)"
        )
    return None


def results_url_problem(url: str) -> str | None:
    """Why a results location URL may not be used as given - a password, a query string or a fragment in it (where
    storage tokens ride: SAS signatures, presigned keys) - in a line that does not show it; None when it may.

    The URL is printed (logs, the flow runs' parameters in Prefect's UI), so it must hold no secret: the
    storage's credentials come from its own environment (AWS_* variables, ~/.aws, GOOGLE_APPLICATION_CREDENTIALS,
    fsspec's config). A user name alone (sftp://user@host) is no secret.
    """
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return "not a URL (not shown); give a folder or an fsspec URL such as s3://bucket/tradeoff"
    if password is not None or parts.query or parts.fragment:
        return (
            "a URL holding a password, a query string or a fragment is refused and not shown (it would be printed "
            "and kept with the flow runs); give the storage's credentials through its environment (AWS_* "
            "variables, ~/.aws, GOOGLE_APPLICATION_CREDENTIALS, fsspec config)"
        )
    return None


def key_source_problem(api_key_env: str | None, api_key_secret: str | None) -> str | None:
    """Why a hosted variant's key may not come from where its config says, in a line that never shows a key."""
    if api_key_env is not None and (problem := key_env_problem(api_key_env)):
        return problem
    if api_key_secret is not None and (problem := secret_block_problem(api_key_secret)):
        return problem
    return None


def key_hosts() -> dict[str, list[str]]:
    """The operator's bindings of keys to hosts (TRADEOFF_KEY_HOSTS): source -> host patterns.

    Entries are separated by ';' or newlines; each is SOURCE=HOST[,HOST...], SOURCE an environment
    variable's name or `secret:<block>`. A malformed entry raises ValueError naming its position (never
    its text: an operator may have pasted a key there).
    """
    out: dict[str, list[str]] = {}
    entries = [e.strip() for e in re.split(r"[;\n]", os.environ.get(KEY_HOSTS_VAR, "")) if e.strip()]
    for i, entry in enumerate(entries, 1):
        source, sep, hosts = (part.strip() for part in entry.partition("="))
        names = [h.strip().lower().rstrip(".") for h in hosts.split(",") if h.strip()]
        secret = source.removeprefix("secret:")
        good_source = _BLOCK_NAME.fullmatch(secret) if source.startswith("secret:") else _ENV_NAME.fullmatch(source)
        if not sep or not good_source or not names or not all(_HOST.fullmatch(h) for h in names):
            raise ValueError(
                f"{KEY_HOSTS_VAR}: entry {i} is not SOURCE=HOST[,HOST...] (SOURCE: a variable name or "
                f"secret:<block>; HOST: a host name or *.domain); entry not shown; fix it"
            )
        out.setdefault(source, []).extend(names)
    return out


def host_matches(host: str, pattern: str) -> bool:
    host = host.lower().rstrip(".")
    return host == pattern or (pattern.startswith("*.") and host.endswith(pattern[1:]))


def key_host_problem(api_key_env: str | None, api_key_secret: str | None, url: str) -> str | None:
    """Why the key of `api_key_env` / `api_key_secret` may not be sent to `url`'s host, or None when it may.

    Loopback is free; any other host must be bound to that key by the operator (TRADEOFF_KEY_HOSTS).
    """
    if not api_key_env and not api_key_secret:
        return None
    host = urlsplit(url).hostname or ""
    if is_loopback(host):
        return None
    field, source = (
        ("engine_args.api_key_env", api_key_env)
        if api_key_env
        else ("engine_args.api_key_secret", f"secret:{api_key_secret}")
    )
    try:
        bound = key_hosts().get(source, [])
    except ValueError as err:
        return f"{field}: {err}"
    if any(host_matches(host, p) for p in bound):
        return None
    where = f"it is bound to {', '.join(bound)}" if bound else "it is bound to no host"
    return (
        f"{field}: the key of {source} may not go to {host}: {where}; if {host} should get it, the operator adds "
        f"'{source}={host}' to {KEY_HOSTS_VAR} (an environment variable, never a config), else fix base_url"
    )


def model_args_problem(model_args: dict[str, Any]) -> str | None:
    """The first lm-eval model_args key a config may not set, with why; values are never shown."""
    for key in model_args:
        if key == "tokenizer_backend" and model_args[key] not in LMEVAL_TOKENIZER_BACKENDS:
            return (
                "'tokenizer_backend' is refused unless huggingface or none: 'remote' and 'auto' send tokenization "
                "requests with their own token and certificate settings, 'tiktoken' downloads; remove it"
            )
        if key in LMEVAL_REFUSED_ARGS:
            return f"'{key}' is refused: {LMEVAL_REFUSED_ARGS[key]}; remove it"
        if key in LMEVAL_OWN_ARGS:
            return f"'{key}' is set by tradeoff ({LMEVAL_OWN_ARGS[key]}); remove it"
        if _CREDENTIAL_WORDS.search(str(key)):
            return (
                f"'{str(key)[:40]}' looks like a credential; keys come only from a hosted variant's api_key_env "
                f"or api_key_secret; remove it"
            )
    return None


_KNOWN_KEYS: set[str] = set()
_KEY_LIKE = [
    re.compile(r"(?i)\b(bearer|basic|token|api[_-]?key)([\s:=\"']+)[A-Za-z0-9._~+/=-]{6,}"),
    re.compile(r"\b(sk|pk|rk|hf|ghp|gho|ghs|glpat|xox[abpr]|AKIA|AIza)[-_A-Za-z0-9]{10,}"),
    re.compile(r"[A-Za-z0-9_\-+/=]{32,}"),  # any long opaque token (base64, hex, JWT parts)
]


def remember_key(key: str | None) -> None:
    """A key read for an endpoint: excerpts of server answers replace it wherever it appears."""
    if key and len(key) >= 4:
        _KNOWN_KEYS.add(key)


def error_excerpt(text: str | None, limit: int = ERROR_EXCERPT_CHARS) -> str | None:
    """`text` (an error built from a server's answer) cut to `limit` characters, keys and key-like tokens replaced."""
    if text is None:
        return None
    for key in sorted(_KNOWN_KEYS, key=len, reverse=True):
        text = text.replace(key, "[key]")
        # An excerpt cut upstream (the perf client keeps 200 characters) may end in the key's first characters.
        cut = next((n for n in range(len(key) - 1, 5, -1) if text.endswith(key[:n])), None)
        if cut:
            text = text[:-cut] + "[key]"
    text = _KEY_LIKE[0].sub(lambda m: f"{m[1]}{m[2]}[redacted]", text)
    for pattern in _KEY_LIKE[1:]:
        text = pattern.sub("[redacted]", text)
    return text if len(text) <= limit else text[: limit - 3] + "..."
