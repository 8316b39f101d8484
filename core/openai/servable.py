"""A text model version: tokenizer IR + transformer IR, serving embeddings or rerank.

It is a ModelVersion, so versions, storage, hot reload, compiled blobs and lazy load work as
for any model. What it adds: the tokenizer (tokenizer.py), the pooling OVMS appends to an
embeddings model (pooling.py), embedding, the rerank chunking and scoring, and /v3/tokenize's
token rows.
"""

from __future__ import annotations

import queue
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from core.errors import InvalidInputError, ServingError
from core.openai import options as task_options
from core.openai.layout import MODEL_FILE, TOKENIZER_FILE
from core.openai.pooling import EMBEDDINGS_OUTPUT, add_pooling
from core.openai.tokenizer import Tokens, load_tokenizers_extension, right_padded, trim
from core.runtime.ov_core import ov_core
from core.serving.model import ModelVersion

SPECIAL_TOKENS_AROUND_PAIR = 4  # BOS query EOS SEP document EOS, as OVMS composes a pair
MAX_TOKEN_ID = 2**31  # OVMS parses token ids as int32
# rows x width^2 of one inference: 32 rows of 512 tokens (all-MiniLM: ~150 MB more RSS)
ATTENTION_BUDGET = 32 * 512 * 512


class TextModelVersion(ModelVersion):
    """One version of an embeddings or rerank model (OVMS's export layout)."""

    options: task_options.TaskOptions

    def _model_path(self) -> Path:
        path = self.folder / MODEL_FILE
        if not path.is_file():
            raise ServingError(f"Could not find {MODEL_FILE} in the model folder")
        return path

    def _build(self) -> None:
        self.options = task_options.read(self.folder, self.config.task, self.config.task_options)
        if not (self.folder / TOKENIZER_FILE).is_file():
            raise ServingError(f"Could not find {TOKENIZER_FILE} in the model folder")
        load_tokenizers_extension()
        tokenizer = ov_core().compile_model(str(self.folder / TOKENIZER_FILE), "CPU")
        self._tokenizers: queue.Queue[ov.InferRequest] = queue.Queue()
        for _ in range(4):
            self._tokenizers.put(tokenizer.create_infer_request())
        self.prefix, self.suffix = self._template()
        super()._build()
        self._check_signature()

    def _compile_config(self) -> dict[str, Any]:
        config = super()._compile_config()
        config.update(
            {
                k: str(v)
                for k, v in self.options.plugin_config.items()
                if k not in self.config.plugin_config
            }
        )  # the config entry wins
        return config

    def _tuning_keys(self) -> set[str]:
        return {*self.config.plugin_config, *self.options.plugin_config}

    def _blob_name(self, core: ov.Core, device: str, properties: dict[str, Any]) -> str:
        """The blob holds the pooling and normalisation too: the options are in its key."""
        from core.runtime import blobs

        if not self.config.allow_cache:
            return ""
        o = self.options
        return blobs.key(
            core,
            device,
            self.files,
            properties,
            (type(self).__name__, o.task, o.pooling, o.normalize),
        )

    def _transform(self, model: ov.Model) -> None:
        if self.options.task == "embeddings":
            add_pooling(model, self.options.pooling, self.options.normalize)

    def _check_signature(self) -> None:
        needed = {"input_ids", "attention_mask"}
        if not needed <= set(self.inputs):
            raise ServingError(
                f"{MODEL_FILE} must take input_ids and attention_mask; it takes "
                f"{', '.join(self.inputs)}"
            )
        if self.options.task == "rerank" and "logits" not in self.outputs:
            raise ServingError(f"A rerank {MODEL_FILE} must have a logits output")

    # -- tokenizer -----------------------------------------------------------------------------

    def tokenize(self, texts: list[str]) -> Tokens:
        request = self._tokenizers.get()
        try:
            result = request.infer([np.array(texts, dtype=np.str_)])
        finally:
            self._tokenizers.put(request)
        ids = np.asarray(result["input_ids"], dtype=np.int64)
        mask = np.asarray(result["attention_mask"], dtype=np.int64)
        return trim(right_padded(Tokens(ids, mask)))

    def _template(self) -> tuple[list[int], list[int]]:
        """The special tokens the tokenizer puts before and after a text: the common start
        of the tokens of "" and of "a", and the rest of those of ""."""
        tokens = self.tokenize(["", "a"])
        empty = [int(t) for t in tokens.ids[0][: tokens.lengths[0]]]
        one = [int(t) for t in tokens.ids[1][: tokens.lengths[1]]]
        start = 0
        while start < len(empty) and start < len(one) and empty[start] == one[start]:
            start += 1
        return empty[:start], empty[start:]

    def strip_special(self, tokens: Tokens) -> list[list[int]]:
        """Each row's text tokens, without the template's special tokens or padding."""
        head, tail = len(self.prefix), len(self.suffix)
        return [
            [int(t) for t in row[head : length - tail]]
            for row, length in zip(tokens.ids, tokens.lengths, strict=True)
        ]

    def truncated(self, tokens: Tokens, limit: int) -> Tokens:
        """Rows cut to `limit` tokens keeping the template's closing tokens, as a tokenizer
        with truncation would cut them."""
        ids, mask = tokens.ids[:, :limit].copy(), tokens.mask[:, :limit].copy()
        tail = self.suffix[: max(limit - len(self.prefix), 0)]
        for row, length in enumerate(tokens.lengths):
            if length > limit and tail:
                ids[row, limit - len(tail) :] = tail
        return Tokens(ids, mask)

    # -- inference -----------------------------------------------------------------------------

    def run(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """The model's one result ([batch, hidden] embeddings or [batch, labels] logits). A
        big batch runs in slices of rows whose attention scores (rows x width x width per
        head) stay within ATTENTION_BUDGET: the memory of one inference grows with them, and
        one request of many long texts would otherwise take the server's (rows are
        independent: each row's answer is the same in any slice)."""
        rows = max(1, ATTENTION_BUDGET // ids.shape[1] ** 2)
        if len(ids) <= rows:
            return self._run_rows(ids, mask)
        slices = range(0, len(ids), rows)
        return np.concatenate(
            [self._run_rows(ids[i : i + rows], mask[i : i + rows]) for i in slices]
        )

    def _run_rows(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        feed = {self._input_ports["input_ids"]: ids, self._input_ports["attention_mask"]: mask}
        if "token_type_ids" in self._input_ports:
            feed[self._input_ports["token_type_ids"]] = np.zeros_like(ids)
        with self.serving():
            outputs = self._run(feed)
        name = EMBEDDINGS_OUTPUT if self.options.task == "embeddings" else "logits"
        return np.asarray(outputs[name], dtype=np.float32)

    def embed(self, texts: list[str]) -> tuple[np.ndarray, int]:
        """-> (embeddings [n, hidden] float32, prompt tokens)."""
        tokens = self.tokenize(texts)
        limit = self.options.context
        if tokens.ids.shape[1] > limit:
            if not self.options.truncate:
                raise InvalidInputError(
                    f"Input length {tokens.ids.shape[1]} longer than allowed {limit}"
                )
            tokens = self.truncated(tokens, limit)
        return self.run(tokens.ids, tokens.mask), int(tokens.mask.sum())

    def embed_tokens(self, rows: list[list[int]]) -> tuple[np.ndarray, int]:
        """Pre-tokenized inputs (ids as the model's tokenizer made them), right-padded."""
        width, limit = max(len(r) for r in rows), self.options.context
        if width > limit:
            raise InvalidInputError(f"Input length {width} longer than allowed {limit}")
        # config.json's vocabulary, else int32 (an id past int64 was a 500)
        bound = self.options.vocab_size or MAX_TOKEN_ID
        if any(t < 0 or t >= bound for r in rows for t in r):
            raise InvalidInputError(f"Token ids must be in [0, {bound})")
        ids = np.full((len(rows), width), self.options.pad_token, dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = row
            mask[i, : len(row)] = 1
        return self.run(ids, mask), int(mask.sum())

    def scores(self, query: str, documents: list[str]) -> np.ndarray:
        """Relevance of each document to the query: sigmoid of the best chunk's logit."""
        o = self.options
        if len(documents) > o.max_chunks:
            raise InvalidInputError("Number of documents exceeds max_allowed_chunks")
        query_tokens, *doc_tokens = self.strip_special(self.tokenize([query, *documents]))
        query_tokens = query_tokens[: o.context // 2]  # OVMS keeps at most half for the query
        room = o.context - len(query_tokens) - SPECIAL_TOKENS_AROUND_PAIR
        if room <= 0:
            raise InvalidInputError("Chunking failed: no space left for chunks")
        chunks, owners = _chunks(doc_tokens, room)
        if len(chunks) > o.max_chunks:
            raise InvalidInputError(
                "Chunking failed: exceeding max_allowed_chunks after chunking limit: "
                f"{o.max_chunks}; actual: {len(chunks)}"
            )
        ids, mask = self._pairs(query_tokens, chunks)
        logits = self.run(ids, mask)
        column = logits[:, 1] if logits.shape[1] > 1 else logits[:, 0]
        chunk_scores = 1.0 / (1.0 + np.exp(-column.astype(np.float64)))
        best = np.zeros(len(documents))
        np.maximum.at(best, np.asarray(owners, dtype=np.int64), chunk_scores)
        return best

    def _pairs(self, query: list[int], chunks: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
        """BOS query EOS SEP chunk EOS, right-padded: the pair layout OVMS builds."""
        bos, eos, sep = self.special_tokens()
        rows = [[bos, *query, eos, sep, *chunk, eos] for chunk in chunks]
        width = max(len(r) for r in rows)
        ids = np.full((len(rows), width), self.options.pad_token, dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = row
            mask[i, : len(row)] = 1
        return ids, mask

    def special_tokens(self) -> tuple[int, int, int]:
        """(bos, eos, sep): config.json's ids, else the tokenizer's template tokens."""
        special = self.options.special
        bos = special.get("bos", self.prefix[0] if self.prefix else None)
        eos = special.get("eos", self.suffix[-1] if self.suffix else None)
        if bos is None or eos is None:
            raise ServingError(
                "Rerank needs BOS and EOS tokens: the tokenizer adds none and "
                "config.json names no bos_token_id / eos_token_id"
            )
        return int(bos), int(eos), int(special.get("sep", eos))


def _chunks(documents: list[list[int]], room: int) -> tuple[list[list[int]], list[int]]:
    """Documents split into chunks of at most `room` tokens, with each chunk's document."""
    chunks: list[list[int]] = []
    owners: list[int] = []
    for index, tokens in enumerate(documents):
        for start in range(0, max(len(tokens), 1), room):
            chunks.append(tokens[start : start + room])
            owners.append(index)
    return chunks, owners


def tokens_of(
    model: TextModelVersion, texts: list[str], parameters: Mapping[str, Any]
) -> list[list[int]]:
    """/v3/tokenize: each text's token ids, cut to max_length (keeping the closing special
    tokens, as the tokenizer's truncation does) and padded when asked."""
    tokens = model.tokenize(texts)
    limit = parameters.get("max_length")
    if parameters.get("add_special_tokens") is False:
        rows = [row[:limit] for row in model.strip_special(tokens)]
    else:
        if limit is not None and tokens.ids.shape[1] > limit:
            tokens = model.truncated(tokens, limit)
        rows = [
            [int(t) for t in row[:n]] for row, n in zip(tokens.ids, tokens.lengths, strict=True)
        ]
    if parameters.get("pad_to_max_length") and limit is not None:
        pad = [model.options.pad_token]
        left = parameters.get("padding_side") == "left"
        rows = [pad * (limit - len(r)) + r if left else r + pad * (limit - len(r)) for r in rows]
    return rows
