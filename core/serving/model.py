"""One model version: find the file, read, reshape/layout, rename, compile, serve requests.

A version is built once per process and reused by every request of a warm instance. Requests
borrow an InferRequest from a pool sized by `nireq`; OpenVINO releases the GIL while it runs,
so concurrent requests from a threaded server really overlap.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from core import metrics
from core.config import BatchingConfig, ModelConfig
from core.errors import InternalError, ModelNotReadyError, ServingError, relative
from core.runtime import adaptive, blobs, devices
from core.runtime import aliases as mapping_config
from core.runtime.adaptive import Variant
from core.runtime.auto_shape import Fit
from core.runtime.batching import Batcher
from core.runtime.blobs import BlobCache
from core.runtime.host import Host
from core.runtime.ov_core import ov_core
from core.serving.servable import State, Status
from core.storage import VersionFiles
from core.tensors import dtypes
from core.tensors.shapes import ANY, Dim, Dims
from core.tensors.spec import Inputs, TensorSpec, validate

log = logging.getLogger("ov_serverless.model")

MODEL_SUFFIXES = (".xml", ".onnx", ".pdmodel", ".pb", ".tflite")
RETIRE_GRACE_S = 2.0


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


class ModelVersion:
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
        self._compiled: ov.CompiledModel | None = None
        self._blob: np.memmap | None = None  # an imported blob's mapping, backing the weights
        self._pool: queue.Queue[ov.InferRequest] = queue.Queue()
        # the variant every request may run on (_compiled, _pool), and the throughput one of
        # an adaptive version once it is compiled (core.runtime.adaptive)
        self._first: Variant | None = None
        self._second: Variant | None = None
        self._second_lock = threading.Lock()
        self._adapts = False
        self._variant_args: tuple[str, dict[str, Any]] = ("", {})  # device, latency properties
        self._batcher: Batcher | None = None
        self._inflight = 0
        self._idle = threading.Condition()
        # set when the first request ends, or on retirement: a waiting blob export runs then
        # (or, retired, gives up)
        self._export_gate = threading.Event()
        # batch_size / shape "auto" (core.runtime.auto_shape): the shapes this version is compiled
        # for, and who reloads it for a request that needs others (set by the model's registry)
        self.fit = Fit()
        self.refit: Callable[[ModelVersion, Inputs], ModelVersion] | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    def load(self) -> None:
        self._set(Status(State.LOADING))
        try:
            self._build()
        except ServingError as exc:
            self._fail("UNKNOWN", exc.message)
        except (RuntimeError, OSError, ValueError, TypeError) as exc:
            self._fail("UNKNOWN", f"Cannot load model {self._files()}: {_cause(exc)}")
        else:
            self._set(Status(State.AVAILABLE))

    def _files(self) -> str:
        """The files a load read, for its error message: `<folder>/model.xml (+ model.bin)`."""
        path = self.model_file or self.folder
        weights = path.with_suffix(".bin")
        return f"{path} (+ {weights.name})" if path.suffix == ".xml" else str(path)

    def unpublish(self) -> bool:
        """Stop taking new requests (UNLOADING); False when it was already retiring."""
        with self._idle:
            if self.status.state >= State.UNLOADING:
                return False
            self._set(Status(State.UNLOADING))
        self._export_gate.set()
        return True

    def drain(self, grace: float = RETIRE_GRACE_S) -> None:
        """After unpublish: wait for in-flight requests, release the resources, then END.

        The grace covers requests that resolved this version just before it was unpublished
        and are still decoding their body: they run on it rather than fail."""
        time.sleep(grace)
        with self._idle:
            self._idle.wait_for(lambda: self._inflight == 0, timeout=300)
            batcher, self._batcher = self._batcher, None
        if batcher is not None:  # joins its threads: not while holding the lock requests take
            batcher.close()
        with self._idle:
            self._idle.wait_for(lambda: self._inflight == 0, timeout=300)  # any that came since
            self._compiled = self._blob = None  # the mapping too: its file may be deleted
            self._first = self._second = None  # both variants of an adaptive version
            self._pool = queue.Queue()
            self._set(Status(State.END))

    def _retiring(self) -> bool:
        return self.status.state >= State.UNLOADING

    def retire(self, grace: float = RETIRE_GRACE_S) -> None:
        """UNLOADING until in-flight requests finish, then END (idempotent)."""
        if self.unpublish():
            self.drain(grace)

    def _build(self) -> None:
        """Import the version's compiled blob if one has its key, else read and compile; the
        served signature comes from the compiled model either way (a blob needs no weights)."""
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
        self.blob_key = self._blob_name(core, device, properties)
        found = self.blobs.find(self.blob_key, self.files) if self.blob_key else None
        started = time.perf_counter()  # after find: a blob's download is a storage timing
        imported = blobs.load(core, found, device, properties) if found else None
        self.timings["blob_hit"] = float(imported is not None)
        self.timings["read_s"] = 0.0  # no read when a blob imports
        model: ov.Model | None = None
        if imported is not None:
            self._compiled, self._blob = imported
        else:
            model = self._read(path, aliases)
            started = time.perf_counter()
            self._compiled = core.compile_model(model, device, properties)
            if self.blob_key:
                self.blobs.save_later(
                    self._compiled, self.blob_key, self._export_gate, self._retiring
                )
        self.timings["compile_s"] = time.perf_counter() - started
        self._describe(self._compiled, aliases)
        self._fill_pool()
        if self.config.dynamic_batching is not None:
            self._start_batching(self.config.dynamic_batching)
        if self._adapts:
            self._variant_args = (device, properties)
            self._second_later(model, aliases)

    def _tuning_keys(self) -> set[str]:
        """The compile properties the config sets (adaptation leaves a tuned version alone)."""
        return set(self.config.plugin_config)

    # -- the throughput variant of an adaptive version (core.runtime.adaptive) -----------------

    def _second_later(self, model: ov.Model | None, aliases: Any) -> None:
        """Compile the throughput variant on a background thread once the first request has
        been answered (at most adaptive.SECOND_WAIT_S after the load), so that the first answer
        does not share the CPU with it."""
        adaptive.compile_later(
            self._export_gate,
            lambda: self._compile_second(model, aliases),
            f"variant-{self.name}-{self.version}",
        )

    def _second_key(self) -> tuple[str, dict[str, Any], str]:
        """The throughput variant's device, compile properties and blob key."""
        device, properties = self._variant_args
        wanted = adaptive.hinted(properties, adaptive.THROUGHPUT)
        return device, wanted, self._blob_name(ov_core(), device, wanted)

    def _compile_second(self, model: ov.Model | None, aliases: Any) -> None:
        """Import or compile the throughput variant and start routing crowds to it (once)."""
        with self._second_lock:
            if self._second is not None or self._retiring():
                return
            core = ov_core()
            device, wanted, key = self._second_key()
            started = time.perf_counter()
            try:
                compiled, blob = self._variant_model(core, device, wanted, key, model, aliases)
            except (ServingError, RuntimeError, OSError, ValueError, TypeError) as exc:
                log.warning(
                    "Version %d of model %s: no throughput variant (%s); every request "
                    "runs on the latency one",
                    self.version,
                    self.name,
                    _cause(exc),
                )
                return
            self.timings["throughput_compile_s"] = time.perf_counter() - started
            second = Variant(
                adaptive.THROUGHPUT,
                compiled,
                self._make_pool(compiled),
                self._served(adaptive.THROUGHPUT),
                blob,
            )
            with self._idle:
                first = self._first
                if first is None or self._retiring():  # retired meanwhile: nothing to serve
                    return
                self._second = second
            labels = (self.name, str(self.version))
            metrics.INFER_REQ_QUEUE_SIZE.labels(*labels).inc(second.pool.qsize())
            metrics.STREAMS.labels(*labels).set(max(_streams(compiled), _streams(first.compiled)))
            if key:
                self.blobs.save_later(compiled, key, self._export_gate, self._retiring)

    def _variant_model(
        self,
        core: ov.Core,
        device: str,
        properties: dict[str, Any],
        key: str,
        model: ov.Model | None,
        aliases: Any,
    ) -> tuple[ov.CompiledModel, np.memmap | None]:
        """The variant's blob when one has its key, else a compile of the version's model (the
        one the first variant compiled, or read again when that one came from a blob)."""
        found = self.blobs.find(key, self.files) if key else None
        imported = blobs.load(core, found, device, properties) if found else None
        if imported is not None:
            return imported
        if model is None:
            read_s = self.timings.get("read_s", 0.0)
            model = self._read(self.model_file or self._model_path(), aliases)
            self.timings["read_s"] = read_s  # the first variant's read stays the cold start's
        return core.compile_model(model, device, properties), None

    def _model_path(self) -> Path:
        """The file to read; subclasses with a fixed layout name theirs."""
        return find_model_file(self.folder)

    def export_blob(self, folder: Path) -> Path | None:
        """Write the compiled model to folder/<blob_key>.blob; None when it is not serving or
        its config disallows blobs (allow_cache false)."""
        compiled = self._compiled
        if compiled is None or not self.available or not self.blob_key:
            return None
        return blobs.write(compiled, self.blob_key, folder)

    def export_blobs(self, folder: Path) -> list[Path]:
        """export_blob, and for an adaptive version its throughput variant's blob too (compiled
        now if the background has not yet): each variant has its own key."""
        first = self.export_blob(folder)
        if first is None:
            return []
        if not self._adapts:
            return [first]
        self._compile_second(None, mapping_config.load(self.folder))  # a no-op once compiled
        second, key = self._second, self._second_key()[2]
        if second is None or not key:
            return [first]
        return [first, blobs.write(second.compiled, key, folder)]

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

    def _read(self, path: Path, aliases: Any) -> ov.Model:
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

    def _compile_config(self) -> dict[str, Any]:
        """Host defaults (core.runtime.host), then the model's plugin_config, which always
        wins. OpenVINO's CACHE_DIR is not set by default: compiled blobs are handled by
        core.runtime.blobs (a plugin_config CACHE_DIR still applies)."""
        config: dict[str, Any] = self.host.default_properties()
        config.update({k: str(v) for k, v in self.config.plugin_config.items()})
        return config

    def _fill_pool(self) -> None:
        """The first variant's InferRequests (every request's, unless the version adapts)."""
        assert self._compiled is not None
        self._pool = self._make_pool(self._compiled, lone=self._adapts)
        kind = adaptive.LATENCY if self._adapts else adaptive.FIXED
        self._first = Variant(kind, self._compiled, self._pool, self._served(kind), self._blob)
        labels = (self.name, str(self.version))
        self._wait_metric = metrics.WAIT_FOR_INFER_REQ.labels(*labels)
        self._active_metric = metrics.INFER_REQ_ACTIVE.labels(*labels)
        metrics.INFER_REQ_QUEUE_SIZE.labels(*labels).set(self._pool.qsize())
        metrics.STREAMS.labels(*labels).set(_streams(self._compiled))

    def _make_pool(
        self, compiled: ov.CompiledModel, lone: bool = False
    ) -> queue.Queue[ov.InferRequest]:
        """nireq InferRequests; by default OpenVINO's optimal number, and on a concurrent host
        at least two per stream, so a stream has the next request queued when one ends. The
        latency variant of an adaptive version (`lone`) only runs a request that is alone in
        flight: one InferRequest (each holds its own activation buffers)."""
        size = self.config.nireq or int(compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))
        if lone:
            size = 1
        elif not self.config.nireq:
            size = max(size, self.host.pool_floor(_streams(compiled)))
        pool: queue.Queue[ov.InferRequest] = queue.Queue()
        for _ in range(max(size, 1)):
            pool.put(compiled.create_infer_request())
        return pool

    def _served(self, kind: str) -> Any:
        return metrics.VARIANT_REQUESTS.labels(self.name, str(self.version), kind)

    def _start_batching(self, config: BatchingConfig) -> None:
        fixed = [
            spec.name
            for spec in (*self.inputs.values(), *self.outputs.values())
            if not spec.dims or not _dynamic(spec.dims[0])
        ]
        if fixed:
            raise ServingError(
                f"dynamic_batching needs a dynamic dim 0 on every input and output (set "
                f"batch_size: -1 or a shape); fixed: {', '.join(fixed)}"
            )
        rows = metrics.BATCH_SIZE.labels(self.name, str(self.version))
        self._batcher = Batcher(
            config,
            self._pool,
            self._infer_on,
            self.name,
            lambda seconds: self._wait_metric.observe(seconds * 1e6),
            rows.observe,
        )

    def _describe(self, compiled: ov.CompiledModel, aliases: Any) -> None:
        for port in compiled.inputs:
            real = _port_name(port)
            served = aliases.inputs.get(real, real)
            self._input_ports[served] = real
            self.inputs[served] = _spec(served, port)
        self.model_inputs = dict(self.inputs)
        for port in compiled.outputs:
            real = _port_name(port)
            served = aliases.outputs.get(real, real)
            self._output_names.append(served)
            self.outputs[served] = _spec(served, port)

    def _set(self, status: Status) -> None:
        self.status = status
        log.info(
            "STATUS CHANGE: Version %d of model %s status change. New status: "
            '( "state": "%s", "error_code": "%s" )',
            self.version,
            self.name,
            status.state.name,
            status.error_code,
        )

    def _fail(self, code: str, message: str) -> None:
        self.status = Status(State.LOADING, code, self._relative(message))
        log.error("Version %d of model %s failed to load: %s", self.version, self.name, message)

    def _relative(self, text: str) -> str:
        """`text` with this version's folder written relative to the model's base path (its
        number): a client never sees the server's absolute paths (the log does)."""
        if self.folder == Path():  # no files were fetched: nothing of the server's to hide
            return text
        return relative(text, self.folder, str(self.version))

    # -- serving -------------------------------------------------------------------------------

    @property
    def available(self) -> bool:
        return self.status.state is State.AVAILABLE

    @property
    def color_format(self) -> str:
        """The channel order jpeg/png inputs are decoded to (BGR or RGB)."""
        return self.config.color_format

    def infer(self, inputs: Inputs) -> dict[str, np.ndarray]:
        """Validate and run one request; outputs are owned by the caller."""
        if self.refit is not None:  # batch_size / shape "auto"
            fitted = self.refit(self, inputs)
            if fitted is not self:
                return fitted.infer(inputs)
        call = self._call(inputs)
        ready = validate(self.model_inputs, call.inputs)
        feed = {self._input_ports[name]: ov_input(array) for name, array in ready.items()}
        with self.serving():
            outputs = self._run(feed, call)
        return call.answer(outputs)

    def _call(self, inputs: Inputs) -> Call:
        """The hook a stateful model overrides: how one call gets the InferRequest it runs
        on. Here: any request of the pool of the variant the requests in flight call for."""
        return Call(self, inputs)

    @contextmanager
    def serving(self) -> Iterator[None]:
        """Count one request in flight; a retiring version still serves requests it got."""
        with self._idle:
            if self._compiled is None or self.status.state not in (
                State.AVAILABLE,
                State.UNLOADING,
            ):
                raise ModelNotReadyError(
                    f"Model with requested version is not loaded yet - name: {self.name}; "
                    f"version: {self.version}"
                )
            self._inflight += 1
        try:
            yield
        finally:
            with self._idle:
                self._inflight -= 1
                self._idle.notify_all()
            if not self._export_gate.is_set():
                self._export_gate.set()

    def _run(self, feed: dict[str, np.ndarray], call: Call | None = None) -> dict[str, np.ndarray]:
        """Run `feed` on the InferRequest `call` borrows (by default one of the pool), timing
        the wait for it and counting the request on its variant, whatever the model."""
        if self._batcher is not None:
            if self._first is not None:
                self._first.served.inc()
            return self._batcher.infer(feed)
        waited = time.perf_counter()
        with (call or Call(self, {})).borrow() as (variant, request):
            self._wait_metric.observe((time.perf_counter() - waited) * 1e6)
            variant.served.inc()
            return self._infer_on(request, feed)

    def first_variant(self) -> Variant:
        """The variant every request may run on; ModelNotReadyError before the load built it
        (serving() only admits a loaded version)."""
        if self._first is None:
            raise ModelNotReadyError(
                f"Model with requested version is not loaded yet - name: {self.name}; "
                f"version: {self.version}"
            )
        return self._first

    def pick_variant(self) -> Variant:
        """The variant a new request runs on: the throughput one among others in flight, once
        compiled (core.runtime.adaptive), else the first."""
        return adaptive.pick(self._inflight, self.first_variant(), self._second)

    @property
    def variants(self) -> tuple[str, ...]:
        """The compiled variants serving now: ("fixed",), ("latency",) or ("latency",
        "throughput")."""
        return tuple(v.kind for v in (self._first, self._second) if v is not None)

    def _infer_on(
        self, request: ov.InferRequest, feed: dict[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        self._active_metric.inc()
        try:
            results = request.infer(feed, share_inputs=True, share_outputs=False)
        except RuntimeError as exc:
            raise inference_error(self.name, self.version, exc) from None
        finally:
            self._active_metric.dec()
        return read_outputs(request, results, self._output_names, self.outputs)


class Call:
    """One infer call as a version serves it: the model inputs it carries, the InferRequest it
    runs on (`borrow`), and what it answers (`answer`). A stateful model's calls (one per
    sequence request, core.serving.stateful) choose their request and handle their state here;
    the timing, metrics and errors around the inference stay ModelVersion's, the same for all."""

    def __init__(self, version: ModelVersion, inputs: Inputs) -> None:
        self.version = version
        self.inputs = inputs

    @contextmanager
    def borrow(self) -> Iterator[tuple[Variant, ov.InferRequest]]:
        """Any InferRequest of the chosen variant's pool, back in the pool afterwards."""
        variant = self.version.pick_variant()
        request = variant.pool.get()
        try:
            yield variant, request
        finally:
            variant.pool.put(request)

    def answer(self, outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return outputs


def ov_input(array: np.ndarray) -> np.ndarray:
    """A validated input as InferRequest.infer takes it (string tensors as numpy bytes)."""
    return dtypes.to_ov_strings(array) if dtypes.is_strings(array) else array


def read_outputs(
    request: ov.InferRequest, results: Any, names: list[str], specs: dict[str, TensorSpec]
) -> dict[str, np.ndarray]:
    """The outputs of one inference by served name. String outputs are read as raw bytes
    (the bindings' default decodes them to str, replacing bytes that are not UTF-8)."""
    outputs: dict[str, np.ndarray] = {}
    for index, (name, value) in enumerate(zip(names, results.to_tuple(), strict=True)):
        if specs[name].dtype is dtypes.BYTES:
            value = dtypes.as_bytes_array(request.get_output_tensor(index).bytes_data)
        outputs[name] = np.asarray(value)
    return outputs


def inference_error(name: str, version: int, exc: Exception) -> InternalError:
    """A failure inside OpenVINO's inference: the client gets OVMS's "Internal inference
    error" (500 / INTERNAL) naming the model and version; the native text, which names C++
    source files and checks, goes to the log only."""
    log.error(
        "Inference failed - name: %s; version: %d: %s", name, version, " ".join(str(exc).split())
    )
    return InternalError(f"Internal inference error - name: {name}; version: {version}")


def _cause(exc: Exception) -> str:
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


def _streams(compiled: ov.CompiledModel) -> int:
    """NUM_STREAMS of a compiled model; 1 where the device does not report it (AUTO)."""
    try:
        return int(compiled.get_property("NUM_STREAMS"))
    except RuntimeError:
        return 1


def _port_name(port: ov.Output) -> str:
    names = port.get_names()
    if names:
        return str(port.get_any_name())
    return str(port.get_node().get_friendly_name())


def _spec(name: str, port: ov.Output) -> TensorSpec:
    shape = port.get_partial_shape()
    dims: Dims = tuple(_dim(d) for d in shape) if shape.rank.is_static else (ANY,)
    layout = ""
    node = port.get_node()
    if hasattr(node, "get_layout"):
        layout = _layout_text(node.get_layout())
    return TensorSpec(name, dtypes.from_ov(port.get_element_type().get_type_name()), dims, layout)


def _dynamic(dim: Dim) -> bool:
    return dim == ANY or dim[0] != dim[1]


def _dim(dim: ov.Dimension) -> Dim:
    if dim.is_static:
        return (dim.get_length(), dim.get_length())
    low, high = dim.get_min_length(), dim.get_max_length()
    return ANY if high == -1 else (max(low, 1), high)


def _layout_text(layout: ov.Layout) -> str:
    text = layout.to_string().strip("[]").replace(",", "")
    return text if text.isalpha() else ""
