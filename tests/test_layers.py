"""The import contract of DESIGN.md: every import in core/ and handlers/ points down the layers

    handlers -> api -> dataplane -> codecs -> serving -> runtime -> config
             -> {storage, metrics, tensors} -> {errors, logs, cors}

A module may import its own group and any group of a lower layer, never a higher layer nor
another group of its own layer. Every import counts, the ones inside functions (lazy, for cold
start) and under TYPE_CHECKING too: they are dependencies all the same. Every module of core/
and handlers/ must belong to a layer, so a new module is placed deliberately.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("core", "handlers")

# Top to bottom; each layer maps a group name to the module prefixes it holds.
LAYERS: list[dict[str, tuple[str, ...]]] = [
    {"handlers": ("handlers",)},
    {"api": ("core.api",)},
    {"dataplane": ("core.dataplane",)},
    {"codecs": ("core.codecs",)},
    {"serving": ("core.serving", "core.openai")},  # core.openai: the text model servables
    {"runtime": ("core.runtime",)},
    {"config": ("core.config", "core.config.pipelines")},
    {
        "storage": ("core.storage",),
        "metrics": ("core.metrics",),
        "tensors": ("core.tensors",),
    },
    # cors.py is the CORS policy value (no imports): config parses it, the router applies it
    {"errors": ("core.errors",), "logs": ("core.logs",), "cors": ("core.cors",)},
]

# (importer, imported) pairs that break the layers, each with the reason it stays.
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("core.config.model_entry", "core.runtime.devices"): "config validates target_device with the "
    "runtime's device grammar (core/config is being regrouped on a33-settings)",
}


def imports(packages: Iterable[str] = PACKAGES) -> dict[str, set[str]]:
    """Module -> the project modules it imports (the most specific existing module). A
    package's __init__ that imports no project module carries no dependency and is left out."""
    graph: dict[str, set[str]] = {}
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            targets = set(_imported(ast.parse(path.read_text()), packages))
            if targets or parts[-1] != "__init__":
                graph[module] = targets
    return graph


def _imported(tree: ast.AST, packages: Iterable[str]) -> Iterable[str]:
    roots = tuple(packages)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.split(".")[0] in roots)
        elif (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and node.module
            and node.module.split(".")[0] in roots
        ):
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                yield name if _is_module(name) else node.module


def _is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def place(module: str) -> tuple[int, str] | None:
    """(layer index, group) of a module: its longest matching prefix wins."""
    best: tuple[int, int, str] | None = None
    for index, groups in enumerate(LAYERS):
        for group, prefixes in groups.items():
            for prefix in prefixes:
                if (module == prefix or module.startswith(prefix + ".")) and (
                    best is None or len(prefix) > best[0]
                ):
                    best = (len(prefix), index, group)
    return None if best is None else (best[1], best[2])


def violations(graph: Mapping[str, set[str]]) -> list[str]:
    """Every import that points up or sideways, and every module no layer holds."""
    found: list[str] = []
    for module, targets in sorted(graph.items()):
        where = place(module)
        if where is None:
            found.append(f"{module}: in no layer")
            continue
        for target in sorted(targets):
            there = place(target)
            if there is None or there == where or (module, target) in EXCEPTIONS:
                continue
            if there[0] < where[0]:
                found.append(f"{module} ({where[1]}) imports {target} ({there[1]}): upward")
            elif there[0] == where[0]:
                found.append(f"{module} ({where[1]}) imports {target} ({there[1]}): sideways")
    return found


def test_every_import_points_down_the_layers() -> None:
    assert violations(imports()) == []


def test_every_exception_is_still_needed() -> None:
    graph = imports()
    assert [pair for pair in EXCEPTIONS if pair[1] not in graph.get(pair[0], set())] == []


def test_a_planted_upward_import_is_reported() -> None:
    graph = imports()
    graph["core.tensors.spec"] = {*graph["core.tensors.spec"], "core.api"}
    graph["core.metrics"] = {*graph["core.metrics"], "core.storage"}
    assert violations(graph) == [
        "core.metrics (metrics) imports core.storage (storage): sideways",
        "core.tensors.spec (tensors) imports core.api (api): upward",
    ]


def test_a_module_outside_every_layer_is_reported() -> None:
    assert violations({"core.newcomer": set()}) == ["core.newcomer: in no layer"]
