"""A pipeline's graph checked at load (OVMS `pipeline_config_list`): every connection names a
known source, the nodes form no cycle, at most one demultiplexer, and each input's dtype and
shape fit what its source produces."""

from __future__ import annotations

from core.config.pipelines import REQUEST, NodeConfig, PipelineConfig
from core.errors import ConfigError
from core.tensors.shapes import ANY, fits, format_dims
from core.tensors.spec import TensorSpec


def check_sources(config: PipelineConfig) -> None:
    """Every connection names the request or a node of this pipeline; names are unique."""
    names = [n.name for n in config.nodes]
    for name in names:
        if names.count(name) > 1:
            raise ConfigError(f"pipeline {config.name}: node name {name} is duplicated")
    for node in config.nodes:
        if node.repeated_inputs:
            raise ConfigError(
                f"pipeline {config.name} node {node.name}: input "
                f"{node.repeated_inputs[0]} is connected to more than one source"
            )
        for item, source in node.inputs.items():
            if source.node != REQUEST and source.node not in names:
                raise ConfigError(
                    f"pipeline {config.name} node {node.name}: input {item} "
                    f"comes from unknown node {source.node!r}"
                )
        if node.gather_from_node:
            _check_gathered(config, node.name, node.gather_from_node)
    for alias, source in config.outputs.items():
        if source.node != REQUEST and source.node not in names:
            raise ConfigError(
                f"pipeline {config.name}: output {alias} comes from unknown node {source.node!r}"
            )


def _check_gathered(config: PipelineConfig, name: str, gathered: str) -> None:
    """gather_from_node names a demultiplexer of this pipeline (OVMS
    PIPELINE_NODE_GATHER_FROM_NOT_EXISTING_NODE, PIPELINE_NODE_GATHER_FROM_NOT_DEMULTIPLEXER)."""
    where = f"pipeline {config.name} node {name}: gather_from_node"
    source = next((n for n in config.nodes if n.name == gathered), None)
    if source is None:
        raise ConfigError(f"{where} names unknown node {gathered!r}")
    if source.demultiply_count is None:
        raise ConfigError(f"{where} names node {gathered}, which is not a demultiplexer")


def check_connected(config: PipelineConfig) -> None:
    """Every node feeds the pipeline's outputs, directly or through other nodes (OVMS refuses
    a pipeline with a node that does not: PIPELINE_CONTAINS_UNCONNECTED_NODES)."""
    feeds = {n.name: {s.node for s in n.inputs.values()} for n in config.nodes}
    reached: set[str] = set()
    todo = [s.node for s in config.outputs.values()]
    while todo:
        name = todo.pop()
        if name in feeds and name not in reached:
            reached.add(name)
            todo.extend(feeds[name])
    idle = [n.name for n in config.nodes if n.name not in reached]
    if idle:
        raise ConfigError(
            f"pipeline {config.name}: node {idle[0]} does not lead to the pipeline's outputs"
        )


def check_demultiply_count(node: NodeConfig, outputs: dict[str, TensorSpec], where: str) -> None:
    """A fixed demultiply_count fits the first dimension each output declares (OVMS
    PIPELINE_DEMULTIPLY_COUNT_DOES_NOT_MATCH_TENSOR_SHARD_COUNT, at load)."""
    count = node.demultiply_count
    if not count or count < 0:
        return  # dynamic
    for item, spec in outputs.items():
        if spec.dims and spec.dims != (ANY,) and not fits(spec.dims[0], count):
            raise ConfigError(
                f"{where}: demultiply_count {count} does not match output {item}'s "
                f"first dimension {format_dims(spec.dims[:1]).strip('()')}"
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
    entry = config.demultiply_count is not None  # the request demultiplexes
    if len(demuxers) + entry > 1:
        raise ConfigError(f"pipeline {config.name}: only one demultiplexer node is supported")
    inside: set[str] = {REQUEST} if entry else set()
    for name in order:
        node = nodes[name]
        fed = {s.node for s in node.inputs.values()} & inside
        if node.demultiply_count is not None or (fed and not node.gather_from_node):
            inside.add(name)
    return inside - {REQUEST}


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
