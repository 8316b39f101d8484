"""One model version's compiled form: find the file, read, reshape/layout, rename, compile (or
import a compiled blob) with the host's defaults, and describe the signature it serves.

core.serving.pools adds the InferRequests of its variants, core.serving.model the lifecycle
and the serving of requests.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from core.config import ModelConfig
from core.errors import InternalError, ServingError
from core.runtime import adaptive, blobs, devices
from core.runtime import aliases as mapping_config
from core.runtime.adaptive import Variant
from core.runtime.aliases import Aliases
from core.runtime.auto_shape import Fit
from core.runtime.batching import Batcher
from core.runtime.blobs import BlobCache
from core.runtime.host import Host
from core.runtime.ov_core import ov_core
from core.serving.ports import port_name, spec
from core.serving.servable import State, Status
from core.storage import VersionFiles
from core.tensors.spec import TensorSpec

log = logging.getLogger("ov_serverless.model")

MODEL_SUFFIXES = (".xml", ".onnx", ".pdmodel", ".pb", ".tflite")


def find_model_file(folder: Path) -> Path:
    """OVMS detection order: IR, ONNX, Paddle, TF SavedModel / frozen pb, TFLite."""
    if (folder / "saved_model.pb").is_file():
        return folder
    files = sorted(p for p in folder.iterdir() if p.is_file())
    for suffix in MODEL_SUFFIXES:
        for path in files:
            if path.suffix == suffix:
                return path
    raise ServingError(f"Could not find file for model in {folder}")


class CompiledVersion:
    """One version's files, config and host, compiled: what it serves and how it was built."""

    single_variant = False  # a subclass that must run on one compiled model (stateful)

    def __init__(
        self,
        config: ModelConfig,
        version: int,
        folder: Path,
        blobs: BlobCache | None = None,
        files: VersionFiles | None = None,
        host: Host | None = None,
    ) -> None:
        self.config = config
        self.name = config.name
        self.version = version
        self.folder = folder
        # what storage fetched into `folder`, some perhaps still in the bucket
        self.files = files if files is not None else VersionFiles(folder)
        self.blobs = blobs if blobs is not None else BlobCache()  # where compiled blobs are
        self.host = host if host is not None else Host()  # concurrent or one at a time
        self.status = Status(State.START)
        self.model_file: Path | None = None  # what _build found in the folder
        self.inputs: dict[str, TensorSpec] = {}
        self.model_inputs: dict[str, TensorSpec] = {}  # what the model reads, of the inputs
        self.outputs: dict[str, TensorSpec] = {}
        self.timings: dict[str, float] = {}
        self._input_ports: dict[str, str] = {}  # served name -> model tensor name
        self._output_names: list[str] = []  # served names in model output order
        self.blob_key = ""  # set by the load; "" when the config disallows blobs
        self.blob_stamp = ""  # names this host's own blobs beside the key (blobs.stamp)
        self._compiled: ov.CompiledModel | None = None
        self._share = True  # requests' arrays read in place (core.runtime.ov_core.shares_inputs)
        self._blob: np.memmap | None = None  # an imported blob's mapping, backing the weights
        self._pool: queue.Queue[ov.InferRequest] = queue.Queue()
        # the variant every request may run on (_compiled, _pool), and the throughput one of
        # an adaptive version once it is compiled (core.runtime.adaptive)
        self._first: Variant | None = None
        self._second: Variant | None = None
        self._second_lock = threading.Lock()
        self._adapts = False
        # compiled once taking 1..GATHER rows, requests gathered (core.runtime.adaptive)
        self.gathered = False
        self._rows_verdict: str | None = None  # adaptive.interaction's, once checked
        self._variant_args: tuple[str, dict[str, Any]] = ("", {})  # device, latency properties
        self._batcher: Batcher | None = None
        self._inflight = 0  # requests running on it (ModelVersion.serving)
        self._idle = threading.Condition()  # guards _inflight, the status and the variants
        # set when the first request ends, or on retirement: a waiting blob export runs then
        # (or, retired, gives up)
        self._export_gate = threading.Event()
        # batch_size / shape "auto" (core.runtime.auto_shape): the shapes this version is compiled
        # for (a request that needs others reloads it: ModelVersion.refit)
        self.fit = Fit()

    def _compile(self) -> tuple[ov.Model | None, Aliases]:
        """Import the version's compiled blob if one has its key, else read and compile; the
        served signature comes from the compiled model either way (a blob needs no weights).
        An adaptive version whose model can be gathered compiles once, taking 1..GATHER rows
        (core.runtime.adaptive); its blob has its own key, looked up first.
        -> the model read (None when a blob imported) and the served names, for a second
        variant's compile."""
        path = self.model_file = self._model_path()
        aliases = mapping_config.load(self.folder)
        core, properties = ov_core(), self._compile_config()
        device = devices.resolve(core, self.config.target_device)
        self._adapts = adaptive.applies(
            self.host.adaptive,
            device,
            self._tuning_keys(),
            self.single_variant or self.config.dynamic_batching is not None,
        )
        if self._adapts:
            properties = adaptive.hinted(properties, adaptive.LATENCY)
        self.blob_stamp = blobs.stamp(self.files)  # before the key reads the files
        self.blob_key = self._blob_name(core, device, properties)
        may_gather = self._may_gather()
        gathered_key = ""
        if may_gather and self.blob_key:
            gathered_key = blobs.extended(self.blob_key, adaptive.GATHER_KEY)
        found = self._find_blob(gathered_key)
        started = time.perf_counter()  # after find: a blob's download is a storage timing
        imported = blobs.load(core, found, device, properties) if found else None
        self.timings["blob_hit"] = float(imported is not None)
        self.timings["read_s"] = 0.0  # no read when a blob imports
        model: ov.Model | None = None
        if imported is not None:
            self._compiled, self._blob = imported
        else:
            model = self._read(path, aliases)
            self.gathered = may_gather and adaptive.gather(model)
            started = time.perf_counter()
            self._compiled = core.compile_model(model, device, properties)
            if self.blob_key and not self.gathered:  # a gathered one once its rows are checked
                self.blobs.save_later(
                    self._compiled,
                    self.blob_key,
                    self.blob_stamp,
                    self._export_gate,
                    self._retiring,
                )
        if self.gathered:
            self.blob_key = gathered_key
        self.timings["compile_s"] = time.perf_counter() - started
        self._describe(self._compiled, aliases)
        self._variant_args = (device, properties)
        return model, aliases

    def _find_blob(self, gathered_key: str) -> Path | None:
        """The blob to import: a gathered compile's first (then the version is gathered),
        else the plain one; None when neither is found."""
        stamp = self.blob_stamp
        found = self.blobs.find(gathered_key, self.files, stamp) if gathered_key else None
        self.gathered = found is not None
        if found is None and self.blob_key:
            found = self.blobs.find(self.blob_key, self.files, stamp)
        return found

    def _may_gather(self) -> bool:
        """Can this version compile gathered? It adapts, its host gathers (OVS_GATHER), and
        its config sets no shape, batch size or layout (they keep their OVMS meaning); whether
        the model itself can is known once it is read (adaptive.gather)."""
        c = self.config
        untouched = c.shape is None and c.batch_size is None and c.layout is None
        return self._adapts and self.host.gather and untouched

    def _retiring(self) -> bool:
        return self.status.state >= State.UNLOADING

    @property
    def available(self) -> bool:
        return self.status.state is State.AVAILABLE

    def _tuning_keys(self) -> set[str]:
        """The compile properties the config sets (adaptation leaves a tuned version alone)."""
        return set(self.config.plugin_config)

    def _model_path(self) -> Path:
        """The file to read; subclasses with a fixed layout name theirs."""
        return find_model_file(self.folder)

    def _compile_config(self) -> dict[str, Any]:
        """Host defaults (core.runtime.host), then the model's plugin_config, which always
        wins. OpenVINO's CACHE_DIR is not set by default: compiled blobs are handled by
        core.runtime.blobs (a plugin_config CACHE_DIR still applies)."""
        config: dict[str, Any] = self.host.default_properties()
        config.update({k: str(v) for k, v in self.config.plugin_config.items()})
        return config

    def _blob_name(self, core: ov.Core, device: str, properties: dict[str, Any]) -> str:
        """The compiled blob's key; "" when the config disallows blobs."""
        c = self.config
        if not c.allow_cache:
            return ""
        return blobs.key(
            core,
            device,
            self.files,
            properties,
            (
                type(self).__name__,
                c.shape,
                c.batch_size,
                c.layout,
                c.stateful,
                c.low_latency_transformation,
                *_graph_extras(c, self.fit),
            ),
        )

    def _read(self, path: Path, aliases: Aliases) -> ov.Model:
        """The model as config says to serve it: weights a bucket still holds are downloaded
        first, then read, transformed (subclasses), reshaped and re-laid-out."""
        from core.runtime import reshape

        self.files.complete()
        started = time.perf_counter()
        model = ov_core().read_model(str(path))
        self.timings["read_s"] = time.perf_counter() - started
        self._transform(model)
        reshape.apply(model, self.config, aliases, self.fit)
        return model

    def _transform(self, model: ov.Model) -> None:
        """Hook for subclasses (stateful models) to transform the read model."""

    def _describe(self, compiled: ov.CompiledModel, aliases: Aliases) -> None:
        """The served signature; a gathered compile's dim 0 (1..GATHER) is served as the
        model's own 1: requests gather on the server, never in one client's request."""
        for port in compiled.inputs:
            real = port_name(port)
            served = aliases.inputs.get(real, real)
            self._input_ports[served] = real
            self.inputs[served] = self._served_spec(served, port)
        self.model_inputs = dict(self.inputs)
        for port in compiled.outputs:
            real = port_name(port)
            served = aliases.outputs.get(real, real)
            self._output_names.append(served)
            self.outputs[served] = self._served_spec(served, port)

    def _served_spec(self, served: str, port: ov.Output) -> TensorSpec:
        described = spec(served, port)
        if not self.gathered:
            return described
        return dataclasses.replace(described, dims=((1, 1), *described.dims[1:]))

    def _second_args(self) -> tuple[str, dict[str, Any]]:
        """The throughput variant's device and compile properties."""
        device, properties = self._variant_args
        return device, adaptive.hinted(properties, adaptive.THROUGHPUT)

    def _variant_model(
        self,
        core: ov.Core,
        device: str,
        properties: dict[str, Any],
        model: ov.Model | None,
        aliases: Aliases,
    ) -> tuple[ov.CompiledModel, np.memmap | None]:
        """The throughput variant: the latency variant's blob imported again with its own hint
        when that variant came from a blob (one mapping: its pages are resident once, and one
        blob serves both), else a compile of the version's model (the one the first variant
        compiled, or read again; a gathered model whose rows interact comes static)."""
        first = self._first
        blob = first.blob if first is not None else None
        if blob is not None and not self.gathered:  # a gathered blob takes 1..GATHER rows
            compiled = blobs.reimport(core, blob, device, properties, self.blob_key)
            if compiled is not None:
                return compiled, blob
        if model is None:
            read_s = self.timings.get("read_s", 0.0)
            model = self._read(self.model_file or self._model_path(), aliases)
            self.timings["read_s"] = read_s  # the first variant's read stays the cold start's
        return core.compile_model(model, device, properties), None

    def export_blob(self, folder: Path) -> Path | None:
        """Write the compiled model to folder/<blob_key>.blob; None when it is not serving or
        its config disallows blobs (allow_cache false)."""
        compiled = self._compiled
        if compiled is None or not self.available or not self.blob_key:
            return None
        return blobs.write(compiled, self.blob_key, folder)


def inference_error(name: str, version: int, exc: Exception) -> InternalError:
    """A failure inside OpenVINO's inference: the client gets OVMS's "Internal inference
    error" (500 / INTERNAL) naming the model and version; the native text, which names C++
    source files and checks, goes to the log only."""
    log.error(
        "Inference failed - name: %s; version: %d: %s", name, version, " ".join(str(exc).split())
    )
    return InternalError(f"Internal inference error - name: {name}; version: {version}")


def ov_cause(exc: Exception) -> str:
    """An OpenVINO error without its C++ source locations: the lines a user can act on."""
    lines = [line.strip() for line in str(exc).splitlines()]
    useful = [
        line for line in lines if line and not line.startswith(("Exception from src/", "Check '"))
    ]
    text = " ".join(useful) or " ".join(line for line in lines if line)
    return f"{type(exc).__name__}: {text}" if not isinstance(exc, RuntimeError) else text


def _graph_extras(config: ModelConfig, fit: Fit) -> tuple[object, ...]:
    """Blob-key parts that change the graph, only when set (keys without them stay as they were)."""
    extras: tuple[object, ...] = (fit,) if fit != Fit() else ()
    if config.mean is not None or config.scale is not None or config.precision is not None:
        extras += ("mean", config.mean, "scale", config.scale, "precision", config.precision)
    return extras


def streams(compiled: ov.CompiledModel) -> int:
    """NUM_STREAMS of a compiled model; 1 where the device does not report it (AUTO)."""
    try:
        return int(compiled.get_property("NUM_STREAMS"))
    except RuntimeError:
        return 1
