"""The public API is documented and typed: every public class, function, method and property
of the package has a docstring, and every parameter and return value a type annotation
(``__init__`` is documented by its class). The package ships ``py.typed``."""
from __future__ import annotations

import inspect
from pathlib import Path

import deltacells as dc
import deltacells.loader as loader
import deltacells.tile as tile
from deltacells.dataset import Batches


def _public_objects():
    yield from ((n, getattr(dc, n)) for n in dc.__all__)
    yield from ((f"loader.{n}", getattr(loader, n)) for n in ("CellBatches", "Batch", "worker_share"))
    yield from ((f"tile.{n}", o) for n, o in vars(tile).items()
                if not n.startswith("_") and getattr(o, "__module__", "") == "deltacells.tile")
    yield "Batches", Batches


def _members(name, cls):
    for mn, m in vars(cls).items():
        if mn.startswith("_") and mn != "__init__":
            continue
        if isinstance(m, (staticmethod, classmethod)):
            m = m.__func__
        if isinstance(m, property):
            m = m.fget
        if inspect.isfunction(m):
            yield f"{name}.{mn}", m


def _problems(name, fn):
    if not name.endswith(".__init__") and not (fn.__doc__ or "").strip():
        yield f"{name}: no docstring"
    sig = inspect.signature(fn)
    for p in sig.parameters.values():
        if p.name not in ("self", "cls") and p.annotation is inspect.Parameter.empty:
            yield f"{name}({p.name}): no annotation"
    if not name.endswith(".__init__") and sig.return_annotation is inspect.Signature.empty:
        yield f"{name}: no return annotation"


def test_public_api_is_documented_and_annotated():
    problems, checked = [], 0
    for name, obj in _public_objects():
        if inspect.isclass(obj):
            if not (obj.__doc__ or "").strip():
                problems.append(f"{name}: no docstring")
            for member, fn in _members(name, obj):
                problems.extend(_problems(member, fn))
                checked += 1
        elif inspect.isfunction(obj):
            problems.extend(_problems(name, obj))
            checked += 1
    assert checked > 80
    assert problems == []


def test_package_is_marked_typed():
    assert (Path(dc.__file__).parent / "py.typed").is_file()
