"""The upper bound of every count and size in a config, read from the models (docs/config-limits.md).

`python -m tasks.config_limits_doc` prints the table that docs/config-limits.md holds; a test keeps
the two equal and checks that no number or list in any config model is left without a bound
(seeds and prices excepted: they are neither counts nor sizes).
"""

from __future__ import annotations

import types
import typing
from typing import Any, Iterator

from pydantic import BaseModel

from tasks.core.bounds import MAX_CONFIG_BYTES, MAX_CONFIG_DEPTH, MAX_CONFIG_NODES
from tasks.core.config import MOVED_TO_DECISION, RunConfig
from tasks.core.registry import SUITES
from tasks.engines.openai_compatible import HostedArgs
from tasks.engines.tensorrt_llm import TrtArgs
from tasks.engines.vllm import VllmArgs
from tasks.loader import register_builtins

# Numbers that are neither counts nor sizes, so carry no upper bound: seeds and prices.
UNBOUNDED = {"seed", "fewshot_seed", "usd_per_hour", "usd_per_1m_input_tokens", "usd_per_1m_output_tokens"}
ENGINE_ARGS = {"openai-compatible": HostedArgs, "tensorrt-llm": TrtArgs, "vllm": VllmArgs}  # llama.cpp: free-form


def _models_in(annotation: Any) -> Iterator[type[BaseModel]]:
    origin = typing.get_origin(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    elif origin is not None or isinstance(annotation, types.UnionType):
        for arg in typing.get_args(annotation):
            yield from _models_in(arg)


def _numbers_in(annotation: Any) -> tuple[bool, bool]:
    """(a number, a list of numbers) somewhere in `annotation`."""
    if annotation in (int, float):
        return True, False
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (list, tuple, set):
        inner = args[0] if args else None
        return False, _numbers_in(inner)[0] if inner is not None else False
    found = [_numbers_in(a) for a in args if a is not type(None)]
    return any(f[0] for f in found), any(f[1] for f in found)


def _bound(metadata: list[Any], names: tuple[str, ...]) -> Any:
    for m in metadata:
        for name in names:
            value = getattr(m, name, None)
            if value is not None:
                return value
    return None


def _item_metadata(annotation: Any) -> list[Any]:
    """Constraints on a list's items (list[Annotated[int, Field(le=...)]])."""
    for arg in typing.get_args(annotation):
        if typing.get_origin(arg) is list:
            return _item_metadata(arg)
        if typing.get_origin(arg) is typing.Annotated:
            return [m for extra in typing.get_args(arg)[1:] for m in getattr(extra, "metadata", [extra])]
    return []


def limit_rows(model: type[BaseModel], prefix: str = "") -> list[tuple[str, str, str, bool]]:
    """(field path, lower bound, upper bound, bounded) of every number and list in `model`, nested models too."""
    rows = []
    for name, f in model.model_fields.items():
        path = f"{prefix}{name}"
        annotation = f.annotation
        nested = list(_models_in(annotation))
        if nested:
            container = typing.get_origin(annotation)
            many = container in (list, dict) or any(
                typing.get_origin(a) in (list, dict) for a in typing.get_args(annotation)
            )
            if many:
                upper = _bound(f.metadata, ("max_length",))
                rows.append((f"{path} (entries)", "", "" if upper is None else f"{upper:,}", upper is not None))
            for m in nested:
                rows += limit_rows(m, f"{path}{'[]' if many else ''}.")
            continue
        number, numbers = _numbers_in(annotation)
        if number:
            lower = _bound(f.metadata, ("ge", "gt"))
            upper = _bound(f.metadata, ("le", "lt"))
            op_low = "> " if _bound(f.metadata, ("gt",)) is not None else ""
            op_up = "< " if _bound(f.metadata, ("lt",)) is not None else ""
            rows.append(
                (
                    path,
                    "" if lower is None else f"{op_low}{lower:,}",
                    "" if upper is None else f"{op_up}{upper:,}",
                    upper is not None or name in UNBOUNDED,
                )
            )
        elif (
            numbers
            or typing.get_origin(annotation) is list
            or list in [typing.get_origin(a) for a in typing.get_args(annotation)]
        ):
            upper = _bound(f.metadata, ("max_length",))
            rows.append((f"{path} (entries)", "", "" if upper is None else f"{upper:,}", upper is not None))
            if numbers:
                item = _item_metadata(annotation)
                item_upper = _bound(item, ("le", "lt"))
                item_lower = _bound(item, ("ge", "gt"))
                item_op = "> " if _bound(item, ("gt",)) is not None else ""
                rows.append(
                    (
                        f"{path}[]",
                        "" if item_lower is None else f"{item_op}{item_lower:,}",
                        "" if item_upper is None else f"{item_upper:,}",
                        item_upper is not None,
                    )
                )
    return rows


def all_limit_rows() -> list[tuple[str, str, str, bool]]:
    """Every config model's rows: the run config, each suite's params, each engine's engine_args."""
    register_builtins()
    moved = tuple(f"perf.{old}" for old, _, _ in MOVED_TO_DECISION)  # set under decision: in a run config
    rows = [r for r in limit_rows(RunConfig) if not any(r[0] == m or r[0].startswith(m + ".") for m in moved)]
    for name in sorted(dict(SUITES)):
        rows += limit_rows(SUITES[name].Params, f"quality.suites[] ({name}).params.")
    for name, args in sorted(ENGINE_ARGS.items()):
        rows += limit_rows(args, f"variants[] ({name}).engine_args.")
    return rows


def limits_markdown() -> str:
    """The table of docs/config-limits.md."""
    lines = ["| field | lowest | highest |", "|---|---|---|"]
    lines += [
        f"| `{path}` | {low or '-'} | {high or ('none (' + ('seed or price' if ok else 'UNBOUNDED') + ')')} |"
        for path, low, high, ok in all_limit_rows()
    ]
    lines += [
        "",
        f"Whole config: at most {MAX_CONFIG_BYTES:,} bytes of YAML (or characters of strings in a config "
        f"mapping), {MAX_CONFIG_NODES:,} values with every YAML alias expanded, {MAX_CONFIG_DEPTH} levels "
        f"of nesting.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(limits_markdown())
