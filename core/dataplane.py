"""The serving calls every front shares: REST routes (core.api) and gRPC servicers
(handlers.grpc_server) translate their wire format and call these, nothing else.

An inference is always the same sequence: resolve the servable, decode the request (the
front's codec, given the servable's signature and the limits), decode jpeg/png images, check
the limits, validate and infer (the servable), encode the reply (the front's codec). The
OpenAI-compatible calls (embeddings, rerank, tokenize) follow it on a text model. Request
metrics are counted around each call and inference metrics around the servable's infer;
metrics never call the model.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np

from core import metrics
from core.codecs import documents, images
from core.codecs.documents import Named, Signed
from core.errors import ConfigError, NotFoundError, ServingError, VersionNotFoundError, relative
from core.serving.registry import FailedPipeline, ModelManager, ServedModel, ServedPipeline
from core.serving.servable import Servable, State
from core.tensors.limits import Limits, check_inputs
from core.tensors.spec import Inputs

if TYPE_CHECKING:
    from core.codecs import openai as openai_wire
    from core.openai.servable import TextModelVersion

Reply = TypeVar("Reply", covariant=True)


class Exchange(Protocol[Reply]):
    """One inference request in a front's wire format (core.codecs.*.PredictCall, InferCall):
    decodes it once the servable is known and encodes the reply in the request's form."""

    def decode(self, servable: Signed, limits: Limits) -> Inputs: ...

    def encode(self, servable: Named, outputs: Mapping[str, np.ndarray]) -> Reply: ...


@dataclass(frozen=True, slots=True)
class Call:
    """Which API method a front is serving, for the request metrics."""

    api: str  # "TensorFlowServing" or "KServe"
    method: str  # "Predict", "ModelInfer", "GetModelMetadata", ...


TFS_PREDICT = Call("TensorFlowServing", "Predict")
TFS_METADATA = Call("TensorFlowServing", "GetModelMetadata")
TFS_STATUS = Call("TensorFlowServing", "GetModelStatus")
KSERVE_INFER = Call("KServe", "ModelInfer")
KSERVE_METADATA = Call("KServe", "ModelMetadata")
KSERVE_READY = Call("KServe", "ModelReady")


class DataPlane:
    """Serving calls on one ModelManager for one front: `interface` ("REST" or "gRPC") labels
    its request metrics; `limits` bound what a request may make the server allocate. Stateless
    beyond these."""

    def __init__(self, manager: ModelManager, interface: str, limits: Limits) -> None:
        self.manager = manager
        self.interface = interface
        self.limits = limits

    def infer(self, call: Call, name: str, version: int | None, exchange: Exchange[Reply]) -> Reply:
        """Resolve -> decode -> images -> limits -> validate and infer -> encode."""
        with metrics.track(call.api, self.interface, call.method, name, version) as track:
            servable = self.manager.get(name, version)
            track.version = servable.version
            inputs = exchange.decode(servable, self.limits)
            inputs = images.decode_inputs(
                servable.inputs, inputs, servable.color_format, self.limits
            )
            check_inputs(self.limits, servable.inputs, inputs)
            with metrics.inference(servable.name, servable.version):
                outputs = servable.infer(inputs)
            return exchange.encode(servable, outputs)

    def servable(
        self, call: Call, name: str, version: int | None, check: Callable[[], None] = lambda: None
    ) -> Servable:
        """The servable a metadata call describes; `check` vets the request first."""
        with metrics.track(call.api, self.interface, call.method, name, version) as track:
            check()
            servable = self.manager.get(name, version)
            track.version = servable.version
            return servable

    def tfs_metadata(
        self, call: Call, name: str, version: int | None, check: Callable[[], None] = lambda: None
    ) -> dict[str, Any]:
        return documents.tfs_metadata(self.servable(call, name, version, check))

    def kserve_metadata(self, call: Call, name: str, version: int | None) -> dict[str, Any]:
        servable = self.servable(call, name, version)
        served = self.manager.model(name)
        return documents.kserve_metadata(
            servable, (served.versions[v] for v in sorted(served.versions))
        )

    def model_status(self, call: Call, name: str, version: int | None) -> dict[str, Any]:
        """`model_version_status` of one version, or of every version when none is given."""
        with metrics.track(call.api, self.interface, call.method, name, None):
            served = self.manager.model(name)
            if version is not None:
                if version not in served.versions:
                    raise VersionNotFoundError(name, version)
                return documents.model_status([served.versions[version]])
            if not served.versions:
                served.default_version()  # raises the model's error
            return documents.model_status(served.versions[v] for v in sorted(served.versions))

    def model_ready(
        self, call: Call, name: str, version: int | None, unknown_raises: bool = False
    ) -> ServingError | None:
        """Why the model (version) cannot serve now, or None when it is ready. With
        `unknown_raises`, an unknown model or version raises instead (gRPC's NOT_FOUND).
        An unknown one counts as a failed request (without its made-up name), a known one
        not ready as a successful answer of false, as OVMS counts them."""
        try:
            with metrics.track(call.api, self.interface, call.method, name, None):
                served = self.manager.model(name)
                if version is not None and version not in served.versions:
                    raise VersionNotFoundError(name, version)
                try:
                    self.manager.get(name, version)
                except ServingError as exc:
                    return exc
                return None
        except ServingError as exc:
            if unknown_raises:
                raise
            return exc

    def config_status(self) -> dict[str, Any]:
        """Every model and pipeline with the status of each version (GET /v1/config)."""
        served: dict[str, ServedModel | ServedPipeline | FailedPipeline] = {
            **self.manager.retired,
            **self.manager.failed_pipelines(),
            **self.manager.models,
            **self.manager.pipelines,
        }
        return {
            name: documents.model_status(entry.versions[v] for v in sorted(entry.versions))
            for name, entry in served.items()
        }

    def reload(self) -> bool:
        """Re-read the config and the repositories; True when anything changed. A rejected
        config's error names paths relative to the config's folder: the caller is a client
        (the server's log keeps the full path)."""
        try:
            return self.manager.reload()
        except ConfigError as exc:
            folder = os.path.dirname(self.manager.settings.config_path or "")
            if not folder:
                raise
            raise ConfigError(relative(exc.message, folder)) from None

    @property
    def ready(self) -> bool:
        return self.manager.ready

    # -- the OpenAI-compatible calls (OVMS's V3 API) -------------------------------------------

    def embeddings(self, call: openai_wire.EmbeddingsCall) -> bytes:
        """Resolve -> decode -> embed (tokenize and infer) -> encode."""
        servable = self._text_model(call.model, "embeddings")
        with metrics.graph(self.interface, call.model):
            request = call.decode(servable.options.max_inputs)
            vectors, tokens = (
                servable.embed_tokens(request.tokens)
                if request.tokens
                else servable.embed(request.texts)
            )
            return call.encode(request, vectors, tokens)

    def rerank(self, call: openai_wire.RerankCall) -> bytes:
        """Resolve -> decode -> score each document (tokenize and infer) -> encode."""
        servable = self._text_model(call.model, "rerank")
        with metrics.graph(self.interface, call.model):
            request = call.decode()
            scores = (
                servable.scores(request.query, request.documents)
                if request.documents
                else np.zeros(0)
            )
            return call.encode(request, scores.tolist())

    def tokenize(self, call: openai_wire.TokenizeCall) -> bytes:
        """The token ids a text model's tokenizer makes of each text."""
        from core.openai.servable import TextModelVersion, tokens_of

        servable = self.manager.get(call.model)
        if not isinstance(servable, TextModelVersion):
            raise NotFoundError(f"Model {call.model} has no tokenizer")
        with metrics.graph(self.interface, call.model):
            request = call.decode(self.limits.max_tensor_elements)
            parameters = dict(request.parameters)
            if servable.options.task == "rerank":
                parameters["add_special_tokens"] = False  # as OVMS tokenizes for a reranker
            return call.encode(tokens_of(servable, request.texts, parameters))

    def listed_models(self) -> list[str]:
        """What /v3/models lists: every model that serves now (or, lazily, on first use), of
        any task, then every pipeline."""
        listed = [name for name in self.manager.models if self._listed(name)]
        return listed + list(self.manager.pipelines)

    def listed_model(self, name: str) -> str:
        """`name` when /v3/models lists it; a 404 otherwise."""
        if not self._listed(name) and name not in self.manager.pipelines:
            raise NotFoundError("Model not found")
        return name

    def _listed(self, name: str) -> bool:
        served = self.manager.models.get(name)
        lazy = self.manager.settings.lazy_load
        return served is not None and any(
            v.available or (lazy and v.status.state is State.START)
            for v in served.versions.values()
        )

    def _text_model(self, name: str, task: str) -> TextModelVersion:
        from core.openai.servable import TextModelVersion

        servable = self.manager.get(name)
        if not isinstance(servable, TextModelVersion) or servable.options.task != task:
            raise NotFoundError(f"Model {name} does not serve {task}")
        return servable
