"""Texts and parsers that several quality suites share (a suite never imports another suite).

- `STORY_PROMPTS`, `STORY_TEMPLATE`: the coherence suite's story requests; identity reuses them as prompts.
- `FIDELITY_TEXT`: the fidelity suite's default corpus; identity and lm-eval's log-likelihood check reuse it.
- `parse_int`: the first integer of an answer (arithmetic, long-context retrieval).
"""

from __future__ import annotations

import re

STORY_PROMPTS = [
    "Write a long story about a lighthouse keeper who finds a message in a bottle.",
    "Write a long story about two children who build a raft and sail down the river to the sea.",
    "Write a long story about a baker in a small mountain village who bakes bread that makes people remember.",
    "Write a long story about an old robot that repairs clocks in a city where time has stopped.",
    "Write a long story about a girl who trains a young dragon to carry letters between villages.",
    "Write a long story about a fisherman who is caught in a storm and washes up on an unknown island.",
    "Write a long story about a librarian who discovers that one book in her library rewrites itself every night.",
    "Write a long story about a musician who travels across the desert to play at a festival.",
]
STORY_TEMPLATE = "{prompt}\n\nStory:\n"

FIDELITY_TEXT = (
    "The river town woke slowly. Before the sun cleared the hills, the baker had already lit his ovens, "
    "and the smell of bread drifted down the narrow streets toward the water. Fishermen checked their nets "
    "and argued about the weather, as they did every morning, while the ferry waited at the dock for the "
    "first passengers of the day. A schoolteacher crossed the square with a stack of books under her arm. "
    "She had promised her students a lesson about the stars, and she had spent the evening reading about "
    "how sailors once used them to find their way across the sea. At the market, a farmer arranged apples "
    "in neat rows and told anyone who would listen that this year's harvest was the best in a decade. "
    "Children ran past him on their way to school, laughing, and a dog followed them as far as the bridge "
    "before deciding to return home. By noon the town was busy: carts rolled over the stones, bells rang "
    "from the tower, and the river carried small boats loaded with wood, grain and cloth to the city in the "
    "south. In the evening, when the work was done, people gathered by the water to watch the light fade, "
    "and the old men told the same stories they had told for forty years, about floods and fires, about "
    "weddings and storms, and about the winter when the river froze so hard that a horse could cross it."
)

_INT = re.compile(r"-?\d[\d,]*")


def parse_int(text: str) -> int | None:
    m = _INT.search(text or "")
    return int(m.group().replace(",", "")) if m else None
