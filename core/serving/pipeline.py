"""Pipelines: a DAG of model and custom nodes, served like a model (OVMS `pipeline_config_list`).

One demultiplexer level is supported: a node with `demultiply_count` splits each output along
its first dimension into N items; the nodes after it run once per item; a node with
`gather_from_node` (or the pipeline's outputs) stacks the items back, adding a leading N dim.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from core.config.pipelines import REQUEST, Connection, NodeConfig, PipelineConfig
from core.errors import ConfigError, InternalError, InvalidInputError, NoResultsError
from core.serving import graph
from core.serving.custom_nodes import BrokenLibrary, CustomNode
from core.serving.servable import Servable, State, Status
from core.tensors import dtypes
from core.tensors.shapes import ANY, fits, format_actual, format_dims
from core.tensors.spec import Inputs, TensorSpec, validate

DEMULTIPLY_LIMIT = 10_000  # OVMS's: a demultiplexer splits in at most this many items
Value = np.ndarray | list[np.ndarray]  # a list holds the per-item values of a demuxed branch


class Models(Protocol):
    def get(self, name: str, version: int | None = None) -> Servable: ...


@dataclass
class _Node:
    config: NodeConfig
    custom: CustomNode | None = None
    inputs: dict[str, TensorSpec] = field(default_factory=dict)
    outputs: dict[str, TensorSpec] = field(default_factory=dict)  # keyed by data_item


class Pipeline:
    """A servable: same routes, metadata and status as a model; version is always 1."""

    version = 1
    color_format = "BGR"  # jpeg/png inputs of a pipeline decode in OpenCV's default order

    def __init__(
        self,
        config: PipelineConfig,
        models: Models,
        libraries: Mapping[str, Any],
        model_names: set[str],
    ) -> None:
        if config.name in model_names:
            raise ConfigError(f"Pipeline name: {config.name} is already occupied by model")
        self.config = config
        self.name = config.name
        self.models = models
        self.status = Status(State.AVAILABLE)
        self.timings: dict[str, float] = {}
        graph.check_sources(config)
        self._order = graph.topological_order(config)
        graph.check_connected(config)
        self._nodes: dict[str, _Node] = {}
        try:
            for node in config.nodes:
                self._nodes[node.name] = self._node(node, libraries, model_names)
        except ConfigError:
            self.retire()  # deinitialize the custom nodes already initialized
            raise
        self._demuxed = graph.demuxed_nodes(config, self._order)
        try:
            self.inputs = self._input_specs()
            self.outputs = self._output_specs()
            self._check_connections()
        except ConfigError:
            self.retire()
            raise

    @property
    def available(self) -> bool:
        return self.status.state is State.AVAILABLE

    # -- load-time validation -------------------------------------------------------------------

    def _node(self, node: NodeConfig, libraries: Mapping[str, Any], models: set[str]) -> _Node:
        where = f"pipeline {self.name} node {node.name}"
        if node.kind == "custom":
            library = libraries.get(node.library or "")
            if library is None:
                raise ConfigError(f"{where}: unknown custom node library {node.library!r}")
            if isinstance(library, BrokenLibrary):
                raise ConfigError(f"{where}: {library.message}")
            custom = CustomNode(node.name, library, node.params)
            try:
                return self._custom_node(node, custom, where)
            except ConfigError:
                custom.close()  # initialized: deinitialize it, as the pipeline does not load
                raise
        if node.model_name not in models:
            raise ConfigError(f"{where}: unknown model {node.model_name!r}")
        try:
            servable = self.models.get(node.model_name or "", node.version)
        except Exception as exc:
            raise ConfigError(f"{where}: model {node.model_name} is not available: {exc}") from exc
        if getattr(getattr(servable, "config", None), "stateful", False):
            raise ConfigError(
                f"{where}: stateful model {node.model_name} cannot be used in a pipeline"
            )
        if getattr(servable, "refit", None) is not None:  # OVMS: FORBIDDEN_MODEL_DYNAMIC_PARAMETER
            raise ConfigError(
                f"{where}: model {node.model_name} has batch_size or shape set to "
                "'auto', which a pipeline does not take; use a dynamic shape "
                "(-1 or a range)"
            )
        graph.check_demultiply_count(node, dict(servable.outputs), where)
        return _Node(node, None, dict(servable.inputs), dict(servable.outputs))

    @staticmethod
    def _custom_node(node: NodeConfig, custom: CustomNode, where: str) -> _Node:
        specs_in, specs_out = custom.specs("inputs"), custom.specs("outputs")
        if not specs_in or not specs_out:
            raise ConfigError(
                f"{where}: the library must define inputs_info and "
                "outputs_info (as OVMS custom nodes do)"
            )
        graph.check_demultiply_count(node, specs_out, where)
        return _Node(node, custom, specs_in, specs_out)

    def _check_connections(self) -> None:
        for node in self._nodes.values():
            where = f"pipeline {self.name} node {node.config.name}"
            missing = sorted(set(node.inputs) - set(node.config.inputs))
            if missing:
                raise ConfigError(f"{where}: input {missing[0]} is not connected")
            for item, source in node.config.inputs.items():
                if item not in node.inputs:
                    raise ConfigError(f"{where}: has no input named {item}")
                if source.node == REQUEST and source.item not in self.config.inputs:
                    raise ConfigError(f"{where}: request has no input {source.item!r}")
                produced = (
                    self._request_item(source.item)
                    if source.node == REQUEST
                    else self._produced(
                        source, node.config.name, bool(node.config.gather_from_node)
                    )
                )
                graph.check_compatible(produced, node.inputs[item], where, item)

    def _produced(self, source: Connection, consumer: str, gathers: bool) -> TensorSpec | None:
        """The spec a connection delivers, as the consumer sees it (demux drops/gather adds
        the leading dim); None for pipeline inputs, which are checked against each consumer."""
        if source.node == REQUEST:
            if source.item not in self.config.inputs:
                raise ConfigError(
                    f"pipeline {self.name} node {consumer}: request has no input {source.item!r}"
                )
            return None
        producer = self._nodes.get(source.node)
        if producer is None:
            raise ConfigError(f"pipeline {self.name} node {consumer}: unknown node {source.node!r}")
        item = producer.config.output_item(source.item)
        if item is None or item not in producer.outputs:
            raise ConfigError(
                f"pipeline {self.name} node {consumer}: node {source.node} has no "
                f"output {source.item!r}"
            )
        spec = producer.outputs[item]
        dims = spec.dims[1:] if producer.config.demultiply_count is not None else spec.dims
        if gathers and source.node in self._demuxed:
            dims = (ANY, *dims)
        return TensorSpec(spec.name, spec.dtype, dims)

    def _request_item(self, name: str) -> TensorSpec | None:
        """A request input as one node run sees it (a row, when the request demultiplexes)."""
        spec = self.inputs.get(name)
        if spec is None or self.config.demultiply_count is None:
            return spec
        return TensorSpec(spec.name, spec.dtype, spec.dims[1:])

    def _input_specs(self) -> dict[str, TensorSpec]:
        specs: dict[str, TensorSpec] = {}
        for name in self.config.inputs:
            for node in self._nodes.values():
                for item, source in node.config.inputs.items():
                    if source == Connection(REQUEST, name) and item in node.inputs:
                        spec = node.inputs[item]
                        specs.setdefault(name, TensorSpec(name, spec.dtype, spec.dims, spec.layout))
            if name not in specs:
                raise ConfigError(f"pipeline {self.name}: input {name} is not connected")
        count = self.config.demultiply_count
        if count is not None:  # OVMS prefixes the demultiplexed dimension
            dim = (count, count) if count > 0 else ANY
            specs = {n: TensorSpec(n, s.dtype, (dim, *s.dims)) for n, s in specs.items()}
        return specs

    def _output_specs(self) -> dict[str, TensorSpec]:
        specs: dict[str, TensorSpec] = {}
        for alias, source in self.config.outputs.items():
            spec = self._produced(source, f"outputs.{alias}", gathers=True)
            if spec is None:
                raise ConfigError(
                    f"pipeline {self.name}: output {alias} cannot come straight from the request"
                )
            specs[alias] = TensorSpec(alias, spec.dtype, spec.dims)
        return specs

    # -- serving ------------------------------------------------------------------------------

    def infer(self, inputs: Inputs) -> dict[str, np.ndarray]:
        checked = validate(self.inputs, inputs)
        values: dict[tuple[str, str], Value] = {
            (REQUEST, name): array for name, array in self._request_rows(checked).items()
        }
        for name in self._order:
            node = self._nodes[name]
            feed = {item: values[(src.node, src.item)] for item, src in node.config.inputs.items()}
            for alias, value in self._run(node, feed).items():
                values[(name, alias)] = value
        return {
            alias: _stacked(values[(src.node, src.item)])
            for alias, src in self.config.outputs.items()
        }

    def _request_rows(self, inputs: dict[str, np.ndarray]) -> dict[str, Value]:
        """The request's inputs, split in rows when the pipeline demultiplexes them."""
        if self.config.demultiply_count is None:
            return dict(inputs)
        counts = {name: (len(v) if v.ndim else 0) for name, v in inputs.items()}
        if len(set(counts.values())) > 1:  # the client's mistake: a 400
            detail = ", ".join(f"{name}: {n}" for name, n in counts.items())
            raise InvalidInputError(
                f"Pipeline {self.name} demultiplexes its inputs, which differ in their "
                f"first dimension ({detail})"
            )
        return {
            name: _split(value, self.name, self.config.demultiply_count)
            for name, value in inputs.items()
        }

    def _run(self, node: _Node, feed: dict[str, Value]) -> dict[str, Value]:
        if node.config.gather_from_node:
            feed = {k: _stacked(v) for k, v in feed.items()}
        branches = [v for v in feed.values() if isinstance(v, list)]
        if branches:
            count = len(branches[0])
            items = [
                self._execute(
                    node, {k: v[i] if isinstance(v, list) else v for k, v in feed.items()}
                )
                for i in range(count)
            ]
            return {alias: [item[alias] for item in items] for alias in node.config.outputs}
        outputs = self._execute(node, {k: v for k, v in feed.items() if not isinstance(v, list)})
        if node.config.demultiply_count is not None:
            _same_item_count(outputs, node.config)
            return {
                alias: _split(value, node.config.name, node.config.demultiply_count)
                for alias, value in outputs.items()
            }
        return dict(outputs)

    def _execute(self, node: _Node, feed: dict[str, Any]) -> dict[str, np.ndarray]:
        if node.custom is not None:
            raw = node.custom.execute(feed)
            _check_custom_outputs(node, raw)
        else:
            raw = self.models.get(node.config.model_name or "", node.config.version).infer(feed)
        aliases = node.config.outputs  # alias -> data_item
        missing = sorted(set(aliases.values()) - set(raw))
        if missing:
            raise InternalError(f"Node {node.config.name} did not produce {missing[0]}")
        return {alias: raw[item] for alias, item in aliases.items()}

    def retire(self) -> None:
        self.status = Status(State.END)
        for node in self._nodes.values():
            if node.custom is not None:
                node.custom.close()


def _check_custom_outputs(node: _Node, raw: Mapping[str, np.ndarray]) -> None:
    """A custom node's outputs must match its outputs_info: a mismatch is the node's bug (500
    naming it), not the client's (a 400 about the next node's input)."""
    for item in sorted(set(node.config.outputs.values())):
        spec, value = node.outputs.get(item), raw.get(item)
        if spec is None or value is None:
            continue  # undeclared: caught at load; missing: reported by _execute
        dtype = dtypes.BY_NUMPY.get(value.dtype)
        rank_free = spec.dims == (ANY,)
        if (
            dtype is not spec.dtype
            or not rank_free
            and (
                value.ndim != len(spec.dims)
                or not all(fits(d, n) for d, n in zip(spec.dims, value.shape, strict=True))
            )
        ):
            raise InternalError(
                f"Custom node {node.config.name} output {item} does not match its "
                f"outputs_info - Expected: {spec.dtype.kserve} {format_dims(spec.dims)}; "
                f"Actual: {dtype.kserve if dtype else value.dtype} {format_actual(value.shape)}"
            )


def _same_item_count(outputs: Mapping[str, np.ndarray], node: NodeConfig) -> None:
    counts = {alias: (len(v) if v.ndim else 0) for alias, v in outputs.items()}
    if len(set(counts.values())) > 1:
        detail = ", ".join(f"{alias}: {n}" for alias, n in counts.items())
        raise InternalError(
            f"Node {node.name} demultiplexer outputs differ in their first dimension ({detail})"
        )


def _split(value: np.ndarray, name: str, expected: int | None) -> list[np.ndarray]:
    """`value`'s rows, for the demultiplexer `name` (a node, or the pipeline's request)."""
    if value.ndim == 0:
        raise InvalidInputError(f"Node {name} output cannot be demultiplexed: a scalar")
    if expected and expected > 0 and len(value) != expected:
        raise InvalidInputError(
            f"Node {name} produced {len(value)} items; demultiply_count is {expected}"
        )
    if len(value) > DEMULTIPLY_LIMIT:
        raise InvalidInputError(
            f"Too large dynamic demultiplication requested. Node {name}: {len(value)} items, "
            f"at most {DEMULTIPLY_LIMIT}"
        )
    if len(value) == 0:
        raise NoResultsError(f"Pipeline node {name} demultiplexer produced no results")
    return [value[i, ...] for i in range(len(value))]  # arrays, also for object dtype


def _stacked(value: Value) -> np.ndarray:
    return np.stack(value) if isinstance(value, list) else value
