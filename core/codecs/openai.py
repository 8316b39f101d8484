"""The OpenAI-compatible wire, as OVMS reads and writes it: JSON bodies <-> plain values.

    POST /v3/embeddings   POST /v3/rerank   POST /v3/tokenize   (and /v1/..., /v3/v1/...)
    GET  /v3/models       GET /v1/models    GET /v3/models/{id}

Each call class parses the request's head (the JSON object and its `model`) when it is built,
its fields once the data plane knows the model (`decode`), and writes the reply (`encode`).
Request-field messages are OVMS's own texts; a ServingError on these routes is sent as
`error_body(exc)`, the OpenAI error shape.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from core.errors import InvalidInputError, ModelNotFoundError, ServingError


def error_body(exc: ServingError) -> bytes:
    """{"error": {"message", "type", "param", "code"}}: what OpenAI clients parse."""
    code = "model_not_found" if isinstance(exc, ModelNotFoundError) else None
    return status_error_body(exc.http_status, exc.message, code)


def status_error_body(status: int, message: str, code: str | None = None) -> bytes:
    """The OpenAI error shape for an answer at any HTTP status (a transport's own 408, 413,
    431...), whichever ServingError it comes from, if any."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    return orjson.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}})


class _Call:
    """A request body's JSON object and the model it names."""

    def __init__(self, body: bytes) -> None:
        self.doc = _document(body)
        self.model = _model_name(self.doc)


# -- embeddings --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EmbeddingsInputs:
    texts: list[str]  # or, when `tokens` is set, none
    tokens: list[list[int]]  # pre-tokenized rows
    encoding: str  # "float" or "base64"


class EmbeddingsCall(_Call):
    def decode(self, max_inputs: int) -> EmbeddingsInputs:
        inputs = _inputs(self.doc, "input")
        encoding = _encoding_format(self.doc)
        if len(inputs) > max_inputs:
            raise InvalidInputError(
                f"Number of inputs {len(inputs)} exceeds the allowed maximum of {max_inputs}"
            )
        if isinstance(inputs[0], str):
            return EmbeddingsInputs(inputs, [], encoding)
        return EmbeddingsInputs([], inputs, encoding)

    def encode(self, request: EmbeddingsInputs, vectors: np.ndarray, tokens: int) -> bytes:
        data = [
            {"object": "embedding", "embedding": _vector(vector, request.encoding), "index": i}
            for i, vector in enumerate(vectors)
        ]
        return orjson.dumps(
            {
                "object": "list",
                "data": data,
                "model": self.model,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
            option=orjson.OPT_SERIALIZE_NUMPY,
        )


def _encoding_format(doc: dict[str, Any]) -> str:
    value = doc.get("encoding_format", "float")
    if value is None:
        return "float"
    if not isinstance(value, str):
        raise InvalidInputError("encoding_format should be string")
    if value not in ("float", "base64"):
        raise InvalidInputError("encoding_format should either base64 or float")
    return value


def _vector(vector: np.ndarray, encoding: str) -> Any:
    if encoding == "base64":  # little-endian float32, as OpenAI and OVMS send it
        return base64.b64encode(vector.astype("<f4").tobytes()).decode()
    return vector


# -- rerank ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RerankInputs:
    query: str
    documents: list[str]
    top_n: int
    return_documents: bool


class RerankCall(_Call):
    def decode(self) -> RerankInputs:
        """The fields, checked with OVMS's messages."""
        doc = self.doc
        if "query" not in doc:
            raise InvalidInputError("query field is missing in request")
        query = doc["query"]
        if not isinstance(query, str):
            raise InvalidInputError("query is not a string")
        documents = _documents(doc)
        top_n = doc.get("top_n")
        if top_n is None:
            top_n = len(documents)
        elif isinstance(top_n, bool) or not isinstance(top_n, int):
            raise InvalidInputError("top_n accepts integer values")
        return_documents = doc.get("return_documents")
        if return_documents is not None and not isinstance(return_documents, bool):
            raise InvalidInputError("return_documents accepts boolean values")
        _check_ignored(doc)
        return RerankInputs(query, documents, top_n, bool(return_documents))

    def encode(self, request: RerankInputs, scores: Sequence[float]) -> bytes:
        """The `top_n` best documents, best first."""
        ranked = sorted(range(len(request.documents)), key=lambda i: -scores[i])
        results = []
        for index in ranked[: max(request.top_n, 0)]:
            result: dict[str, Any] = {"index": index, "relevance_score": float(scores[index])}
            if request.return_documents:
                result["document"] = {"text": request.documents[index]}
            results.append(result)
        return orjson.dumps({"results": results})


def _documents(doc: dict[str, Any]) -> list[str]:
    if "documents" not in doc:
        raise InvalidInputError("documents field is missing in request")
    documents = doc["documents"]
    if not isinstance(documents, list):
        raise InvalidInputError("documents is not an array")
    for item in documents:
        if isinstance(item, dict):
            raise InvalidInputError(
                "document objects (title/text) are not supported; send documents as strings"
            )
        if not isinstance(item, str):
            raise InvalidInputError("documents array element is neither string nor object")
    return documents


def _check_ignored(doc: dict[str, Any]) -> None:
    """rank_fields and max_chunks_per_doc: type-checked, then ignored, as OVMS does."""
    fields = doc.get("rank_fields")
    if fields is not None and not isinstance(fields, list):
        raise InvalidInputError("rank_fields is not an array")
    if fields and not all(isinstance(f, str) for f in fields):
        raise InvalidInputError("rank_fields array element is not a string")
    chunks = doc.get("max_chunks_per_doc")
    if chunks is not None and (isinstance(chunks, bool) or not isinstance(chunks, int)):
        raise InvalidInputError("max_chunks_per_doc accepts integer values")


# -- tokenize ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TokenizeInputs:
    texts: list[str]
    parameters: dict[str, Any]  # max_length, pad_to_max_length, add_special_tokens, padding_side


class TokenizeCall(_Call):
    def decode(self, max_tokens: int) -> TokenizeInputs:
        """`max_tokens`: the most token ids padding may make in all (the request limits' tensor
        elements): pad_to_max_length with a max_length of 2**40 is a 400, not a MemoryError or
        a server out of memory."""
        texts = _inputs(self.doc, "text")
        if not all(isinstance(item, str) for item in texts):
            raise InvalidInputError("Input should be string or array of strings")
        parameters = _tokenize_parameters(self.doc)
        padded = len(texts) * parameters.get("max_length", 0)
        if parameters.get("pad_to_max_length") and padded > max_tokens:
            raise InvalidInputError(
                f"pad_to_max_length to max_length {parameters['max_length']} makes {padded} "
                f"token ids, more than the limit of {max_tokens}"
            )
        return TokenizeInputs(texts, parameters)  # type: ignore[arg-type]

    def encode(self, rows: list[list[int]]) -> bytes:
        return orjson.dumps({"tokens": rows if len(rows) > 1 else rows[0]})


def _tokenize_parameters(doc: dict[str, Any]) -> dict[str, Any]:
    parameters: dict[str, Any] = {}
    if doc.get("max_length") is not None:
        value = doc["max_length"]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidInputError("max_length should be unsigned integer")
        if value == 0:
            raise InvalidInputError("max_length should be greater than 0")
        parameters["max_length"] = value
    for key in ("pad_to_max_length", "add_special_tokens"):
        if doc.get(key) is not None:
            if not isinstance(doc[key], bool):
                raise InvalidInputError(f"{key} should be boolean")
            parameters[key] = doc[key]
    side = doc.get("padding_side")
    if side is not None:
        if not isinstance(side, str):
            raise InvalidInputError("padding_side should be string, either left or right")
        if side not in ("left", "right"):
            raise InvalidInputError("padding_side should be either left or right")
        parameters["padding_side"] = side
    return parameters


# -- models ------------------------------------------------------------------------------------


def model_list(names: Sequence[str], created: int) -> bytes:
    return orjson.dumps({"data": [_model_entry(n, created) for n in names], "object": "list"})


def model_info(name: str, created: int) -> bytes:
    return orjson.dumps(_model_entry(name, created))


def _model_entry(name: str, created: int) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": created, "owned_by": "OVMS"}


# -- request fields shared by the calls --------------------------------------------------------


def _document(body: bytes) -> dict[str, Any]:
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise InvalidInputError("Cannot parse JSON body") from None
    if not isinstance(doc, dict):
        raise InvalidInputError("Received json is not an object")
    return doc


def _model_name(doc: dict[str, Any]) -> str:
    name = doc.get("model")
    if name is None:
        raise InvalidInputError("model field is missing in JSON body")
    if not isinstance(name, str):
        raise InvalidInputError("model accepts string values")
    return name


def _inputs(doc: dict[str, Any], field: str) -> list[str] | list[list[int]]:
    """Strings, or token ids (an array of integers, or arrays of them), as OVMS parses them."""
    value = doc.get(field)
    if value is None:
        raise InvalidInputError(f"{field} field is required")
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise InvalidInputError(f"{field} should be string, array of strings or array of integers")
    if not value:
        raise InvalidInputError(f"{field} array should not be empty")
    kinds = {_kind(item, field) for item in value}
    if len(kinds) > 1:
        raise InvalidInputError(f"{field} must be homogeneous")
    kind = kinds.pop()
    if kind == "int":
        return [list(value)]
    if kind == "str_list":
        raise InvalidInputError(
            f"{field} must be either array of strings or array of array of integers"
        )
    return value


def _kind(item: Any, field: str) -> str:
    if isinstance(item, str):
        return "str"
    if _is_int(item):
        return "int"
    if isinstance(item, list):
        if not item:
            raise InvalidInputError(f"inner arrays in {field} should not be empty")
        if all(_is_int(v) for v in item):
            return "int_list"
        if all(isinstance(v, str) for v in item):
            return "str_list"
        raise InvalidInputError(f"{field} must be homogeneous")
    raise InvalidInputError(f"every element in {field} array should be either string or int")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
