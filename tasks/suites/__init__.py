"""Quality suites beyond arithmetic and fidelity; each module registers its suites on import.

- longctx: passkey retrieval over a context-length x needle-depth grid
- coherence: long generations scored for repetition, loops, distinct-n, semantic drift, judge
- code: small Python functions from specs; share that parses and share that passes tests
- multiturn: facts given early in a conversation, asked back later
- identity: greedy output identity of a speculative variant against plain decoding
- fidelity: the `fidelity` suite for every engine (endpoint top-k log-probabilities, transformers
  references), replacing quality.py's llama.cpp-only one under the same name
- lmeval: lm-evaluation-harness tasks through lm-eval's own API model classes, and the
  log-likelihood check of each path against in-process llama.cpp logits
"""

from tasks.suites import code, coherence, fidelity, identity, lmeval, longctx, multiturn  # noqa: F401
