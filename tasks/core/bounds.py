"""How big a config may be: its file, its YAML once aliases are expanded, and every count and size in it.

A config is YAML written by people (or handed to a flow as a Prefect parameter). YAML anchors
and aliases (`&vllm` ... `*vllm`, merge keys `<<: *vllm`) are kept - the shipped configs use
them - but the document is measured with every alias expanded before anything is built from it,
so an alias bomb (each level referring to the one before ten times) is refused in milliseconds
instead of expanding to gigabytes in pydantic, `config_json` and the run folder. The same
budget applies to a config mapping that arrives as a flow parameter.

Every count, size, duration and rate in the config models carries an upper bound in its
pydantic Field (`le=`, `lt=`, `max_length=`); `tasks.config_limits_doc` lists them from the models
(docs/config-limits.md is its output, and a test keeps the two equal).
"""

from __future__ import annotations

from typing import Any

import yaml

MAX_CONFIG_BYTES = 1 << 20  # a config file, or the characters of a config mapping's strings
MAX_CONFIG_NODES = 100_000  # scalars, mappings and sequences, with every alias expanded
MAX_CONFIG_DEPTH = 32  # nesting of mappings and sequences


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, used node by node so the document can be measured before it is built."""


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _expanded(root: yaml.Node) -> tuple[int, int]:
    """(nodes, depth) of the document with aliases expanded, each capped just above its limit; ValueError for a
    recursive alias. Linear in the nodes as written: a shared node is measured once."""
    size: dict[int, tuple[int, int]] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            kids = [size[id(c)] for c in _children(node)]
            nodes = min(1 + sum(k[0] for k in kids), MAX_CONFIG_NODES + 1)
            size[key] = (nodes, min(1 + max((k[1] for k in kids), default=0), MAX_CONFIG_DEPTH + 1))
            continue
        if key in size:
            continue
        if key in on_path:
            raise ValueError("a YAML alias refers to a node that contains it (a recursive alias); write the values out")
        on_path.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in size)
    return size[id(root)]


def load_yaml(text: str, what: str = "config") -> Any:
    """`yaml.safe_load(text)`, refused (ValueError, one line) when the text or its alias-expanded document is
    over the limits. yaml.YAMLError for bad syntax, as safe_load."""
    if len(text.encode()) > MAX_CONFIG_BYTES:
        raise ValueError(
            f"{what}: {len(text.encode())} bytes, over the {MAX_CONFIG_BYTES}-byte limit; split it or trim it"
        )
    loader = _Loader(text)
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:
            raise ValueError(f"{what}: nested too deeply to read (limit {MAX_CONFIG_DEPTH} levels)") from None
        if node is None:
            return None
        nodes, depth = _expanded(node)
        if nodes > MAX_CONFIG_NODES:
            raise ValueError(
                f"{what}: its YAML aliases expand to more than {MAX_CONFIG_NODES} values (an alias bomb?); "
                f"write the values out or use fewer aliases"
            )
        if depth > MAX_CONFIG_DEPTH:
            raise ValueError(f"{what}: nested deeper than {MAX_CONFIG_DEPTH} levels; flatten it")
        try:
            return loader.construct_document(node)
        except ValueError as err:  # e.g. an integer of more than 4300 digits
            raise ValueError(f"{what}: a value cannot be read ({str(err).splitlines()[0][:120]}); fix it") from None
    finally:
        loader.dispose()


def data_problem(data: Any, what: str = "config") -> str | None:
    """Why a config mapping (a flow parameter, or YAML already read) is over the limits, or None.

    Counts shared objects once per reference, as the expanded document would be; stops at the limit."""
    nodes, chars = 0, 0
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        nodes += 1
        if nodes > MAX_CONFIG_NODES:
            return f"{what}: more than {MAX_CONFIG_NODES} values (shared references expanded); trim it"
        if depth > MAX_CONFIG_DEPTH:
            return f"{what}: nested deeper than {MAX_CONFIG_DEPTH} levels; flatten it"
        if isinstance(value, str):
            chars += len(value)
        elif isinstance(value, dict):
            chars += sum(len(k) for k in value if isinstance(k, str))
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, (list, tuple)):
            stack.extend((v, depth + 1) for v in value)
        if chars > MAX_CONFIG_BYTES:
            return f"{what}: its strings hold more than {MAX_CONFIG_BYTES} characters; trim it"
    return None
