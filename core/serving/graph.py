"""A pipeline's graph checked at load (OVMS `pipeline_config_list`): every connection names a
known source, the nodes form no cycle, at most one demultiplexer, and each input's dtype and
shape fit what its source produces."""

from __future__ import annotations

from core.config.pipelines import REQUEST, PipelineConfig
from core.errors import ConfigError
from core.tensors.shapes import ANY, format_dims
from core.tensors.spec import TensorSpec


def check_sources(config: PipelineConfig) -> None:
    """Every connection names the request or a node of this pipeline; names are unique."""
    names = [n.name for n in config.nodes]
    for name in names:
        if names.count(name) > 1:
            raise ConfigError(f"pipeline {config.name}: node name {name} is duplicated")
    for node in config.nodes:
        for item, source in node.inputs.items():
            if source.node != REQUEST and source.node not in names:
                raise ConfigError(
                    f"pipeline {config.name} node {node.name}: input {item} "
                    f"comes from unknown node {source.node!r}"
                )
        if node.gather_from_node and node.gather_from_node not in names:
            raise ConfigError(
                f"pipeline {config.name} node {node.name}: gather_from_node "
                f"names unknown node {node.gather_from_node!r}"
            )
    for alias, source in config.outputs.items():
        if source.node != REQUEST and source.node not in names:
            raise ConfigError(
                f"pipeline {config.name}: output {alias} comes from unknown node {source.node!r}"
            )


def topological_order(config: PipelineConfig) -> list[str]:
    deps = {n.name: {s.node for s in n.inputs.values() if s.node != REQUEST} for n in config.nodes}
    order: list[str] = []
    ready = sorted(name for name, d in deps.items() if not d)
    while ready:
        name = ready.pop(0)
        order.append(name)
        for other, d in deps.items():
            if name in d:
                d.discard(name)
                if not d and other not in order and other not in ready:
                    ready.append(other)
    if len(order) != len(deps):
        stuck = sorted(set(deps) - set(order))
        raise ConfigError(f"pipeline {config.name}: nodes {', '.join(stuck)} form a cycle")
    return order


def demuxed_nodes(config: PipelineConfig, order: list[str]) -> set[str]:
    """Nodes whose outputs are per-item lists: the demultiplexer and those after it, up to
    (not including) a gathering node."""
    nodes = {n.name: n for n in config.nodes}
    demuxers = [n for n in config.nodes if n.demultiply_count is not None]
    if len(demuxers) > 1:
        raise ConfigError(f"pipeline {config.name}: only one demultiplexer node is supported")
    inside: set[str] = set()
    for name in order:
        node = nodes[name]
        fed = {s.node for s in node.inputs.values()} & inside
        if node.demultiply_count is not None or (fed and not node.gather_from_node):
            inside.add(name)
    return inside


def check_compatible(
    produced: TensorSpec | None, expected: TensorSpec, where: str, item: str
) -> None:
    if produced is None:
        return
    if produced.dtype is not expected.dtype:
        raise ConfigError(
            f"{where}: input {item} expects {expected.dtype.kserve} but its "
            f"source produces {produced.dtype.kserve}"
        )
    if (
        expected.dims != (ANY,)
        and produced.dims != (ANY,)
        and (
            len(produced.dims) != len(expected.dims)
            or not all(_overlap(a, b) for a, b in zip(produced.dims, expected.dims, strict=True))
        )
    ):
        raise ConfigError(
            f"{where}: input {item} expects shape {format_dims(expected.dims)} "
            f"but its source produces {format_dims(produced.dims)}"
        )


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    if a[0] == -1 or b[0] == -1:
        return True
    return max(a[0], b[0]) <= min(a[1], b[1])
