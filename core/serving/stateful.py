"""Stateful (sequence) models, as OVMS serves them.

Requests carry two special inputs: `sequence_id` (uint64, shape [1]) and
`sequence_control_input` (uint32, shape [1]: 0 = none, 1 = START, 2 = END). Each sequence owns
one InferRequest, so its ReadValue/Assign variables are isolated from other sequences. Every
response carries `sequence_id`. Idle sequences are swept on the request path (no background
thread: a frozen serverless instance must not need one). Sequences live only in this process.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field

import numpy as np
import openvino as ov

from core.errors import InvalidInputError, NotFoundError, ServingError
from core.runtime.adaptive import Variant
from core.runtime.host import SEQUENCE_IDLE_S
from core.serving.model import Call, ModelVersion
from core.tensors import dtypes
from core.tensors.spec import Inputs, TensorSpec

SEQUENCE_ID = "sequence_id"
CONTROL = "sequence_control_input"
NO_CONTROL, START, END = 0, 1, 2
IDLE_SECONDS = SEQUENCE_IDLE_S


class SequenceExistsError(ServingError):
    http_status = 409
    grpc_code = "ALREADY_EXISTS"


class TooManySequencesError(ServingError):
    http_status = 503
    grpc_code = "UNAVAILABLE"


@dataclass
class _Sequence:
    request: ov.InferRequest
    used: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)


class StatefulModelVersion(ModelVersion):
    single_variant = True  # a sequence's state lives in one InferRequest of one compiled model

    def _build(self) -> None:
        super()._build()
        self.inputs = {
            **self.inputs,
            SEQUENCE_ID: TensorSpec(SEQUENCE_ID, dtypes.BY_KSERVE["UINT64"], ((1, 1),)),
            CONTROL: TensorSpec(CONTROL, dtypes.BY_KSERVE["UINT32"], ((1, 1),)),
        }
        self.outputs = {
            **self.outputs,
            SEQUENCE_ID: TensorSpec(SEQUENCE_ID, dtypes.BY_KSERVE["UINT64"], ((1, 1),)),
        }
        self._sequences: dict[int, _Sequence] = {}
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._swept = time.monotonic()
        self.idle_seconds = self.host.sequence_idle_s  # the manager's cleaner setting

    def _transform(self, model: ov.Model) -> None:
        if self.config.low_latency_transformation:
            from openvino._offline_transformations import apply_low_latency_transformation

            apply_low_latency_transformation(model, True)

    def _call(self, inputs: Inputs) -> Call:
        """A sequence's call: its special inputs read off, the rest for the model."""
        inputs = dict(inputs)
        sequence_id = _scalar(inputs.pop(SEQUENCE_ID, None), SEQUENCE_ID)
        control = _scalar(inputs.pop(CONTROL, None), CONTROL) or NO_CONTROL
        if control not in (NO_CONTROL, START, END):
            raise InvalidInputError(
                f"Special input {CONTROL} must be 0, 1 (start) or 2 (end); got {control}"
            )
        self._sweep()
        return _SequenceCall(self, inputs, sequence_id, control)

    def _open(self, sequence_id: int | None, control: int) -> tuple[int, _Sequence]:
        assert self._compiled is not None
        with self._lock:
            if control == START:
                if sequence_id and sequence_id in self._sequences:
                    raise SequenceExistsError(
                        f"Sequence with provided ID already exists - id: {sequence_id}"
                    )
                if len(self._sequences) >= self.config.max_sequence_number:
                    raise TooManySequencesError(
                        "Max sequence number has been reached. Could not create new sequence."
                    )
                number = sequence_id or self._new_id()
                self._sequences[number] = _Sequence(self._compiled.create_infer_request())
                return number, self._sequences[number]
            if not sequence_id:
                raise InvalidInputError("Sequence id has not been provided in request inputs")
            found = self._sequences.get(sequence_id)
            if found is None:
                raise NotFoundError(f"Sequence with provided ID does not exist - id: {sequence_id}")
            return sequence_id, found

    def end_sequence(self, number: int) -> None:
        with self._lock:
            self._sequences.pop(number, None)

    def _new_id(self) -> int:
        number = next(self._ids)
        while number in self._sequences:
            number = next(self._ids)
        return number

    def _sweep(self) -> None:
        """Drop sequences idle longer than idle_seconds (checked at most once a second)."""
        now = time.monotonic()
        if not self.config.idle_sequence_cleanup or now - self._swept < min(1.0, self.idle_seconds):
            return
        self._swept = now
        with self._lock:
            for number in [
                n for n, s in self._sequences.items() if now - s.used > self.idle_seconds
            ]:
                del self._sequences[number]

    def restart_ids(self, first: int) -> None:
        """Server-assigned sequence ids count on from `first` (a restored snapshot's copies
        must not hand out the same ones)."""
        with self._lock:
            self._ids = itertools.count(first)

    def restart_clocks(self, now: float) -> None:
        """Idle times count from `now` (monotonic times taken before a snapshot mean nothing
        after its restore)."""
        with self._lock:
            self._swept = now
            for sequence in self._sequences.values():
                sequence.used = now

    @property
    def sequence_count(self) -> int:
        return len(self._sequences)


class _SequenceCall(Call):
    """A call runs on its sequence's own InferRequest (opened by START, dropped after END),
    one call of a sequence at a time; its answer carries the sequence's id."""

    version: StatefulModelVersion

    def __init__(
        self, version: StatefulModelVersion, inputs: Inputs, sequence_id: int | None, control: int
    ) -> None:
        super().__init__(version, inputs)
        self.sequence_id, self.control = sequence_id, control
        self.number = 0

    def take(self) -> tuple[Variant, ov.InferRequest]:
        """The sequence's own InferRequest, once its previous call is done."""
        variant = self.version.first_variant()
        self.number, self.sequence = self.version._open(self.sequence_id, self.control)
        self.sequence.lock.acquire()
        self.sequence.used = time.monotonic()
        return variant, self.sequence.request

    def give_back(self, variant: Variant, request: ov.InferRequest) -> None:
        self.sequence.lock.release()

    def answer(self, outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.control == END:
            self.version.end_sequence(self.number)
        outputs[SEQUENCE_ID] = np.array([self.number], dtype=np.uint64)
        return outputs


def _scalar(value: np.ndarray | None, name: str) -> int | None:
    if value is None:
        return None
    array = np.asarray(value)
    if array.dtype.kind not in "iu" or array.size != 1:
        raise InvalidInputError(f"Special input {name} must be one unsigned integer, shape [1]")
    number = int(array.reshape(-1)[0])
    if number < 0:
        raise InvalidInputError(f"Special input {name} must not be negative")
    return number
