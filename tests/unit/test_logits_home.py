"""One home for log-probabilities: tasks/quality/logits.py alone opens llama.cpp with every position's logits
(`logits_all=True`) and turns logits into log-probabilities; every other module calls into it.

Read from the source with ast (code only: docstrings and comments may name them). A log-softmax is any
of: a function defined as `log_softmax`/`logsumexp`, a use of an attribute of those names or of
llama-cpp-python's `logits_to_logprobs` (`scipy.special.log_softmax`, `torch.log_softmax`, a tensor's
`.log_softmax`), an import of them from anywhere but tasks.quality.logits, or a hand-written
`log(... exp(...) ...)`.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers import ROOT

HOME = Path("tasks/quality/logits.py")
SCANNED = ("tasks", "flows", "warehouse")
NAMES = ("log_softmax", "logsumexp", "logits_to_logprobs")


def callee(node: ast.Call) -> str:
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def logits_all_sites(tree: ast.AST) -> list[int]:
    """Lines of calls that pass `logits_all=True` (a model opened with every position's logits)."""
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and any(
            k.arg == "logits_all" and isinstance(k.value, ast.Constant) and k.value.value is True for k in node.keywords
        )
    ]


def log_softmax_sites(tree: ast.AST) -> list[int]:
    """Lines where a log-softmax is written or taken from a library."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in NAMES:
            lines.append(node.lineno)
        elif isinstance(node, ast.Attribute) and node.attr in NAMES:
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module != "tasks.quality.logits":
            lines += [node.lineno for a in node.names if a.name in NAMES]
        elif isinstance(node, ast.Call) and callee(node) == "log":
            inner = (n for arg in node.args for n in ast.walk(arg))
            if any(isinstance(n, ast.Call) and callee(n) == "exp" for n in inner):
                lines.append(node.lineno)
    return lines


def sites(find) -> dict[str, list[int]]:
    out = {}
    for pkg in SCANNED:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            found = find(ast.parse(path.read_text(), str(path)))
            if found:
                out[str(path.relative_to(ROOT))] = found
    return out


def test_the_checks_find_what_they_look_for() -> None:
    flagged = [
        "m = x.max(axis=1, keepdims=True)\nlogp = x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))",
        "lse = math.log(sum(math.exp(v) for v in row))",
        "from scipy.special import log_softmax",
        "y = scipy.special.log_softmax(x, axis=-1)",
        "y = torch.nn.functional.log_softmax(t, dim=-1)",
        "y = t.log_softmax(-1)",
        "y = Llama.logits_to_logprobs(row)",
        "def log_softmax(x):\n    return x",
    ]
    for code in flagged:
        assert log_softmax_sites(ast.parse(code)), code
    for code in ("y = np.log(p)", "from tasks.quality.logits import log_softmax", "e = np.exp(np.log(x))"):
        assert log_softmax_sites(ast.parse(code)) == [], code
    assert logits_all_sites(ast.parse("llm = Llama(model_path=p, logits_all=True, n_ctx=512)")) == [1]
    assert logits_all_sites(ast.parse('args = {"logits_all": True}\nLlama(model_path=p, logits_all=False)')) == []


def test_one_model_opened_with_all_logits() -> None:
    """One `logits_all=True` construction in the tree, in tasks/quality/logits.py."""
    found = sites(logits_all_sites)
    assert {path: len(lines) for path, lines in found.items()} == {str(HOME): 1}


def test_log_softmax_only_in_logits() -> None:
    found = sites(log_softmax_sites)
    assert str(HOME) in found  # the check sees the one home's own
    assert {path: lines for path, lines in found.items() if path != str(HOME)} == {}
