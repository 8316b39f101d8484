"""The download of one object into a file by the REST storage clients (s3/, gcs/, azure/
rest.py): one GET hashed as it comes, or for a big file ranges fetched in parallel, each
If-Match the listed tag; the bytes checked against the digests the provider names (of the
whole object, of each range, or made of the parts'). A mismatch is a StorageError.
"""

from __future__ import annotations

import http.client
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from email.message import Message
from pathlib import Path
from typing import TypeVar

from core.storage import checksums
from core.storage.backend import RemoteObject
from core.storage.checksums import Check, Digest, Updater
from core.storage.http_client import Headers, Response
from core.storage.secrets import StorageError

RANGED_MIN_BYTES = 16 << 20  # boto3's multipart threshold on the boto3 path
PART_BYTES = 8 << 20
PART_WORKERS = 4
CHUNK_BYTES = 1 << 20
T = TypeVar("T")
Get = Callable[[dict[str, str], Callable[[Response], T]], T]  # (extra headers, use) -> use()
DigestOf = Callable[[Response], Digest | None]  # the object's digest a response names
log = logging.getLogger("ov_serverless.storage")

IGNORED_RANGE = "; the endpoint, or a proxy before it, ignored the Range header"
NO_HEADERS = Message()  # the headers of no answer


@dataclass(frozen=True)
class Ranges:
    """How a provider reads a big file in ranges and checks them. By default: PART_BYTES
    ranges, checked against a CRC of the whole object the first range's answer names (hashed
    in order from disk, each range once it is in: a CRC costs little beside the download).

    `headers` go with every range. `side()` is a request run beside the ranges (S3 names no
    checksum in a ranged answer: a HEAD does); its answer's headers (NO_HEADERS when it failed)
    go to `hashes`, `named` and `whole`. `hashes(side)`: the algorithms each range's bytes are
    hashed with in its worker as they arrive (only then does a worker wait for the side
    answer), for `part(answer, digests)` (the range's own digest, as Azure gives it) and
    `whole(digests of each range in order, side)` (a digest made of the parts',
    as S3's multipart ETag and composite checksums are). `named(side)`: the whole object's
    digest, hashed in order when its algorithm is `in_order`; `tentative(side)`: that digest
    may be of another kind, so a mismatch of it refuses nothing. Checks return '' when the
    bytes match, the words of the error when not, None when they cannot tell. The file is
    refused when no check passed and one failed."""

    size: int = PART_BYTES
    headers: dict[str, str] = field(default_factory=dict)
    side: Callable[[], Headers] | None = None
    hashes: Callable[[Headers], frozenset[str]] | None = None
    part: Callable[[Response, dict[str, bytes]], str | None] | None = None
    whole: Callable[[list[dict[str, bytes]], Headers], str | None] | None = None
    named: Callable[[Headers], Digest | None] = lambda _: None
    tentative: Callable[[Headers], bool] = lambda _: False
    in_order: frozenset[str] = checksums.FAST


@dataclass(frozen=True)
class _Got:
    """A range's answer, its bytes' digests (by algorithm) and whether `part` checked it."""

    answer: Response
    digests: dict[str, bytes]
    checked: bool


def download(
    obj: RemoteObject,
    dest: Path,
    what: str,
    get: Get[int],
    whole_hint: str = IGNORED_RANGE,
    digest: DigestOf = lambda _: None,
    whole: dict[str, str] | None = None,
    ranges: Ranges | None = None,
) -> None:
    """obj into dest: one GET (with the `whole` headers), hashed as it comes against the
    `digest(response)` it names; or for a big file, `ranges` (see Ranges) PART_WORKERS at a
    time; either If-Match the listed tag, so a file replaced since the listing fails (412).
    `whole_hint` ends the error for a range answered with the whole object (the provider's
    likely cause). A mismatch is a StorageError; the caller drops the file."""
    with open(dest, "w+b") as file:  # read too: a big file's CRC is computed from disk
        fd = file.fileno()
        if obj.size >= RANGED_MIN_BYTES:
            _ranged(obj, fd, what, get, whole_hint, digest, ranges or Ranges())
            return
        checks: list[Check | None] = []  # one per attempt (a retry starts over)

        def use(response: Response) -> int:
            checks.append(checksums.start(digest(response)))
            return copy(response, fd, 0, truncate=True, check=checks[-1])

        # If-Match the listed tag: a file replaced since the listing fails (412, or 404 for
        # a generation gone) instead of mixing two uploads in one version folder
        get({**(whole or {}), **({"If-Match": obj.tag} if obj.tag else {})}, use)
        _verify(what, checks[-1])


def _ranged(
    obj: RemoteObject,
    fd: int,
    what: str,
    get: Get[int],
    whole_hint: str,
    digest: DigestOf,
    ranges: Ranges,
) -> None:
    os.ftruncate(fd, obj.size)
    starts = range(0, obj.size, ranges.size)
    got: list[_Got] = []
    check: Check | None = None
    written = _Written(len(starts))
    with ThreadPoolExecutor(PART_WORKERS + (ranges.side is not None)) as pool:
        side = _beside(pool, ranges.side)
        parts = [
            pool.submit(_part, obj, start, fd, what, get, whole_hint, ranges, side, index, written)
            for index, start in enumerate(starts)
        ]
        for part in parts:
            part.add_done_callback(written.wake)
        try:
            for index, (start, part) in enumerate(zip(starts, parts, strict=True)):
                end = min(start + ranges.size, obj.size)
                # with a check, follow the range's bytes onto the disk as they come
                hashed = start if check is None else _follow(fd, start, index, part, written, check)
                got.append(part.result())
                if index == 0:
                    named = ranges.named(side()) or digest(got[0].answer)
                    check = checksums.start(named, ranges.in_order)
                if check is not None:
                    _hash_range(fd, hashed, end, check)
        except BaseException:
            for part in parts:
                part.cancel()  # no more ranges of a failed download
            raise
    if check is not None and written.rewritten:  # a retry rewrote bytes the hash had seen
        check = checksums.start(named, ranges.in_order)
        if check is not None:
            _hash_range(fd, 0, obj.size, check)
    in_order = check.problem() if check is not None else None
    if in_order and ranges.tentative(side()):
        in_order = None
    made = None
    if ranges.whole is not None and got[0].digests:
        made = ranges.whole([g.digests for g in got], side())
    told = [result for result in (in_order, made) if result is not None]
    if told and "" not in told:
        raise StorageError(f"{what}: {told[0]}")
    if not told and not all(g.checked for g in got):
        log.debug(
            "%s: not verified (read in ranges, and the service names no checksum of them "
            "this client can compute)",
            what.removeprefix("Cannot "),
        )


def _beside(
    pool: ThreadPoolExecutor, request: Callable[[], Headers] | None
) -> Callable[[], Headers]:
    """`request` started in `pool`; -> a call waiting for its answer's headers (NO_HEADERS
    when there is no request or it failed: the download goes on without what it tells)."""
    future = pool.submit(request) if request is not None else None

    def answer() -> Headers:
        if future is None:
            return NO_HEADERS
        try:
            return future.result()
        except StorageError as exc:
            log.debug("no checksum from the request beside the ranges: %s", exc)
            return NO_HEADERS

    return answer


def _part(
    obj: RemoteObject,
    start: int,
    fd: int,
    what: str,
    get: Get[int],
    whole_hint: str,
    ranges: Ranges,
    side: Callable[[], Headers],
    index: int,
    progress: _Written,
) -> _Got:
    end = min(start + ranges.size, obj.size) - 1
    got: list[_Got] = []  # the last attempt's

    def use(response: Response) -> int:
        _partial(response, f"{what}: bytes {start}-{end}", whole_hint)
        progress.restart(index)
        hashers = _hashers(ranges.hashes(side())) if ranges.hashes is not None else {}
        fanout = _Fanout(list(hashers.values())) if hashers else None
        written = copy(response, fd, start, check=fanout, wrote=lambda n: progress.add(index, n))
        if written < end - start + 1:  # the connection ended early: retried as a drop
            raise http.client.IncompleteRead(b"", end - start + 1 - written)
        digests = {name: hasher.digest() for name, hasher in hashers.items()}
        problem = ranges.part(response, digests) if ranges.part is not None else None
        if problem:
            raise StorageError(f"{what}: bytes {start}-{end}: {problem}")
        got.append(_Got(response, digests, problem is not None))
        return written

    headers = {**ranges.headers, "Range": f"bytes={start}-{end}", "If-Match": obj.tag}
    written = get(headers, use)
    if written != end - start + 1:
        raise StorageError(f"{what}: got {written} bytes of range {start}-{end}")
    return got[-1]


def _hashers(algorithms: frozenset[str]) -> dict[str, checksums.Hasher]:
    hashers = {name: checksums.new_hasher(name) for name in algorithms}
    return {name: hasher for name, hasher in hashers.items() if hasher is not None}


class _Fanout:
    """Every chunk to each hasher."""

    def __init__(self, hashers: list[checksums.Hasher]) -> None:
        self._hashers = hashers

    def update(self, data: bytes | memoryview, /) -> None:
        for hasher in self._hashers:
            hasher.update(data)


class _Written:
    """How many bytes of each range are on disk, counted from its start, so that the in-order
    hash follows the download instead of waiting for whole ranges (a transfer slower than the
    hash then hides it). A range retried after some of its bytes were written is rewritten:
    the hash may have seen the failed attempt's bytes, so the file is hashed again at the end."""

    def __init__(self, count: int) -> None:
        self._bytes = [0] * count
        self._changed = threading.Condition()
        self.rewritten = False

    def restart(self, index: int) -> None:
        with self._changed:
            self.rewritten = self.rewritten or self._bytes[index] > 0
            self._bytes[index] = 0

    def add(self, index: int, count: int) -> None:
        with self._changed:
            self._bytes[index] += count
            self._changed.notify_all()

    def wake(self, _: object = None) -> None:
        with self._changed:
            self._changed.notify_all()

    def wait(self, index: int, seen: int, part: Future[_Got]) -> int:
        """The range's bytes on disk once more than `seen` are, or its part is done."""
        with self._changed:
            self._changed.wait_for(lambda: self._bytes[index] > seen or part.done())
            return self._bytes[index]


def _follow(
    fd: int, start: int, index: int, part: Future[_Got], written: _Written, check: Check
) -> int:
    """Hash range `index`'s bytes as its worker writes them, until its part is done; -> the
    offset hashed up to (the rest is hashed once the part's result is in)."""
    hashed = start
    while not part.done():
        on_disk = start + written.wait(index, hashed - start, part)
        if on_disk > hashed:
            _hash_range(fd, hashed, on_disk, check)
            hashed = on_disk
    return hashed


def _hash_range(fd: int, start: int, end: int, check: Check) -> None:
    while start < end:
        chunk = os.pread(fd, min(CHUNK_BYTES, end - start), start)
        if not chunk:
            break
        check.update(chunk)
        start += len(chunk)


def _verify(what: str, check: Check | None) -> None:
    problem = check.problem() if check is not None else ""
    if problem:
        raise StorageError(f"{what}: {problem}")


def _partial(response: Response, what: str, whole_hint: str) -> Response:
    """A ranged answer, or the error for a whole object (written at the part's offset it
    would corrupt the file)."""
    if response.status != 206:
        raise StorageError(
            f"{what} were answered {response.status} with the whole object{whole_hint}"
        )
    return response


def copy(
    response: Response,
    fd: int,
    start: int,
    truncate: bool = False,
    check: Updater | None = None,
    wrote: Callable[[int], None] | None = None,
) -> int:
    """The body into fd from offset `start`; -> bytes written. `truncate`: a whole file, whose
    retry must not keep a failed attempt's tail. `check`: its hasher sees every byte.
    `wrote(n)`: called after each n bytes are written."""
    if truncate:
        os.ftruncate(fd, start)
    written = 0
    while chunk := response.read(CHUNK_BYTES):
        if check is not None:
            check.update(chunk)
        view = memoryview(chunk)
        while view:
            n = os.pwrite(fd, view, start + written)
            view, written = view[n:], written + n
            if wrote is not None:
                wrote(n)
    return written
