"""`pipeline_config_list` and `custom_node_library_config_list` of an OVMS config.json."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core.config.fields import object_of, required_list, required_text
from core.config.notices import notice_once
from core.errors import ConfigError

REQUEST = "request"
_PIPELINE_KEYS = {"name", "inputs", "nodes", "outputs", "demultiply_count"}
_NODE_KEYS = {
    "name",
    "type",
    "model_name",
    "version",
    "library_name",
    "params",
    "inputs",
    "outputs",
    "demultiply_count",
    "gather_from_node",
}


@dataclass(frozen=True)
class Connection:
    node: str  # "request" for the pipeline's own inputs
    item: str


@dataclass(frozen=True)
class NodeConfig:
    name: str
    kind: str  # "DL model" | "custom"
    model_name: str | None = None
    version: int | None = None
    library: str | None = None
    params: dict[str, str] = field(default_factory=dict)
    inputs: dict[str, Connection] = field(default_factory=dict)  # node input -> source
    outputs: dict[str, str] = field(default_factory=dict)  # alias -> data_item (as OVMS keys them)
    demultiply_count: int | None = None  # 0 or -1: dynamic
    gather_from_node: str | None = None
    # inputs listed more than once (the last source is in `inputs`); refused at load, per
    # pipeline, as OVMS refuses them (PIPELINE_MODEL_INPUT_CONNECTED_TO_MULTIPLE_DATA_SOURCES)
    repeated_inputs: tuple[str, ...] = ()

    def output_item(self, alias: str) -> str | None:
        return self.outputs.get(alias)


@dataclass(frozen=True)
class PipelineConfig:
    name: str
    inputs: tuple[str, ...]
    nodes: tuple[NodeConfig, ...]
    outputs: dict[str, Connection]
    # set: the request is the demultiplexer (its inputs split along a new first dimension)
    demultiply_count: int | None = None


@dataclass(frozen=True)
class LibraryConfig:
    name: str
    base_path: str  # a .py file (relative to config.json) or a module name


def parse_libraries(value: Any, path: str, resolve: Any) -> tuple[LibraryConfig, ...]:
    items = required_list(value, path)
    libraries = []
    for i, item in enumerate(items):
        where = f"{path}[{i}]"
        object_of(item, {"name", "base_path"}, where)
        base = required_text(item.get("base_path"), f"{where}.base_path")
        base = resolve(base) if base.endswith(".py") else base
        libraries.append(LibraryConfig(required_text(item.get("name"), f"{where}.name"), base))
    return tuple(libraries)


def parse_pipelines(value: Any, path: str) -> tuple[PipelineConfig, ...]:
    pipelines: list[PipelineConfig] = []
    for i, item in enumerate(required_list(value, path)):
        where = f"{path}[{i}]"
        object_of(item, _PIPELINE_KEYS, where)
        inputs = required_list(item.get("inputs"), f"{where}.inputs")
        name = required_text(item.get("name"), f"{where}.name")
        if any(p.name == name for p in pipelines):  # OVMS loads the first definition only
            notice_once(
                name,
                "duplicated pipeline",
                f"Duplicated pipeline names: {name} defined in config file. "
                "Only first definition will be loaded.",
            )  # once: a reload re-reads the file
            continue
        pipelines.append(
            PipelineConfig(
                name=name,
                inputs=tuple(
                    required_text(x, f"{where}.inputs[{j}]") for j, x in enumerate(inputs)
                ),
                nodes=tuple(
                    _node(n, f"{where}.nodes[{j}]")
                    for j, n in enumerate(required_list(item.get("nodes"), f"{where}.nodes"))
                ),
                outputs=_connections(item.get("outputs"), f"{where}.outputs"),
                demultiply_count=_demultiply_count(item, where),
            )
        )
    return tuple(pipelines)


def _node(item: Any, where: str) -> NodeConfig:
    object_of(item, _NODE_KEYS, where)
    kind = item.get("type")
    if kind not in ("DL model", "custom"):
        raise ConfigError(f'{where}.type: must be "DL model" or "custom"')
    name = required_text(item.get("name"), f"{where}.name")
    if name == REQUEST:
        raise ConfigError(f'{where}.name: "request" is reserved')
    outputs: dict[str, str] = {}
    for j, out in enumerate(required_list(item.get("outputs"), f"{where}.outputs")):
        object_of(out, {"data_item", "alias"}, f"{where}.outputs[{j}]")
        alias = required_text(out.get("alias"), f"{where}.outputs[{j}].alias")
        outputs[alias] = required_text(out.get("data_item"), f"{where}.outputs[{j}].data_item")
    version = item.get("version")
    if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
        raise ConfigError(f"{where}.version: an integer")
    return NodeConfig(
        name=name,
        kind=kind,
        model_name=required_text(item.get("model_name"), f"{where}.model_name")
        if kind == "DL model"
        else None,
        version=version or None,
        library=required_text(item.get("library_name"), f"{where}.library_name")
        if kind == "custom"
        else None,
        params={str(k): str(v) for k, v in (item.get("params") or {}).items()},
        inputs=_connections(item.get("inputs"), f"{where}.inputs"),
        outputs=outputs,
        demultiply_count=_demultiply_count(item, where),
        gather_from_node=item.get("gather_from_node"),
        repeated_inputs=_repeated_names(item.get("inputs")),
    )


def _demultiply_count(item: dict[str, Any], where: str) -> int | None:
    demux = item.get("demultiply_count")
    if demux is not None and (
        isinstance(demux, bool) or not isinstance(demux, int) or not -1 <= demux <= 10000
    ):
        raise ConfigError(f"{where}.demultiply_count: an integer from -1 to 10000")
    return demux


def _repeated_names(entries: list[dict[str, Any]]) -> tuple[str, ...]:
    """Names that several entries of a (checked) connection list connect."""
    names = [name for entry in entries for name in entry]
    return tuple(sorted({name for name in names if names.count(name) > 1}))


def _connections(value: Any, where: str) -> dict[str, Connection]:
    """[{"name": {"node_name": ..., "data_item": ...}}, ...] -> {name: Connection}."""
    found: dict[str, Connection] = {}
    for j, entry in enumerate(required_list(value, where)):
        if not isinstance(entry, dict) or len(entry) != 1:
            raise ConfigError(
                f'{where}[{j}]: expected {{"name": {{"node_name": ..., "data_item": ...}}}}}}}}'
            )
        ((name, source),) = entry.items()
        object_of(source, {"node_name", "data_item"}, f"{where}[{j}].{name}")
        at = f"{where}[{j}].{name}"
        found[name] = Connection(
            required_text(source.get("node_name"), f"{at}.node_name"),
            required_text(source.get("data_item"), f"{at}.data_item"),
        )
    return found
