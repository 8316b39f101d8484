"""Compiled-model blobs a new instance imports instead of compiling.

A blob is `CompiledModel.export_model()` of one model version as this process compiled it,
stored as `<key>.blob`. The key hashes everything that decides what a compile produces: the
OpenVINO version, the device with its FULL_DEVICE_NAME and OPTIMIZATION_CAPABILITIES, the CPU's
ISA flags (Lambda and Cloud Run CPUs vary), the compile properties, the model config fields
that change the graph (shape, batch_size, layout, stateful transformation), and the version's
files, recursively: graph files (.xml, .onnx, ...) in full, weight files by size and 64
samples of 4 KiB spread across them (reading 100 MB to hash it would cost more than the
compile saves). Weight files of a version fetched from a bucket are keyed by their listed size
and tag (ETag / generation, which change whenever the content does) instead, read or not: a
load that imports a blob never downloads them. Export blobs for a bucket's models from a server
that serves them from that bucket (export_manager), so that the keys agree.

Where blobs are looked up and written is a value, a BlobCache each ModelManager owns and passes
to the versions it compiles. Lookup order (first hit wins; a blob that fails to import falls
back to a compile):
  1. OVS_COMPILED_CACHE: folders, ':'-separated, e.g. a read-only folder baked into the image
  2. `<version folder>/.ov-compiled/`: blobs shipped in a local repository
  3. `<cache_dir>/blobs/`: written by this host after a compile (concurrent hosts only, in a
     background thread after the version is serving, so a cold start never waits for it; not
     on Cloud Run, where the whole filesystem is memory and each instance starts empty),
     named by the key and the mtimes of the weight files it only samples (own_name)
  4. `<version>/.ov-compiled/` in the bucket: a version's download leaves its blobs (and its
     weights) out, and only the one with this host's key is downloaded, now
     (VersionFiles.blob, core.storage); the weights follow only if no blob imports
Import reads the blob through a copy-on-write memory map (no read into Python bytes).
A concurrent host's gathered compile (one compile taking 1..4 rows, core.runtime.adaptive)
writes its blob under the plain key `extended` by ("gathered", 4), and only once its rows were
checked independent; a load looks that key up first, then the plain one, so that a gathered
blob imports as gathered without the model being read, and a plain blob never does.

Measured on the 2-core bench machine (bench/run.py), OpenVINO 2026.4, ResNet-50-sized FP16
IR: compile 0.11 s, blob import 0.07 s. OpenVINO's own CACHE_DIR hit is as fast, but its
populating run costs more than a plain compile on every new instance whose cache starts
empty (every Lambda sandbox, every Cloud Run instance), so it is no longer set by default.
A blob in the bucket replaces the weights' download (0.90-0.93x the minimal script's cold start
against 0.85-0.87x when it compiles, from the S3 emulator): it pays where the compile takes longer
than the blob's download; bake blobs into the image instead where possible.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from core.runtime import background
from core.storage import BLOB_FOLDER, GRAPH_SUFFIXES, VersionFiles

log = logging.getLogger("ov_serverless.compiled_cache")

SAMPLES = 64
SAMPLE_BYTES = 4096
EXPORT_WAIT_S = 10.0  # an idle server exports its blobs this long after the load


# -- keys --------------------------------------------------------------------------------------

_device_ids: dict[str, str] = {}  # what this host's devices are: read once, see forget_host
_device_lock = threading.Lock()


def device_id(core: ov.Core, device: str) -> str:
    """What a blob's key holds of the device: OpenVINO's version, the device's name and
    capabilities, the CPU's ISA flags (read once per process, see forget_host)."""
    with _device_lock:
        if device not in _device_ids:
            parts = [ov.get_version(), device]
            for name in ("FULL_DEVICE_NAME", "OPTIMIZATION_CAPABILITIES"):
                try:
                    parts.append(str(core.get_property(device.split(":")[0], name)))
                except RuntimeError:
                    parts.append("?")
            parts.append(cpu_flags())
            _device_ids[device] = "\n".join(parts)
        return _device_ids[device]


def forget_host() -> None:
    """Read the devices again on the next key: the process may run on another CPU now (a
    SnapStart restore)."""
    with _device_lock:
        _device_ids.clear()


def cpu_flags() -> str:
    """The CPU's ISA flags that decide what a compile produces, space-separated and sorted."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                wanted = ("avx", "amx", "sse4", "fma", "f16c", "vnni", "sve", "asimd")
                return " ".join(
                    sorted(f for f in line.split(":", 1)[1].split() if f.startswith(wanted))
                )
    except OSError:
        pass
    return ""


def key(
    core: ov.Core,
    device: str,
    files: VersionFiles,
    properties: dict[str, Any],
    model_options: Iterable[object],
) -> str:
    digest = hashlib.blake2b(digest_size=16)
    digest.update(device_id(core, device).encode())
    for name, value in sorted(properties.items()):
        if name != "CACHE_DIR":
            digest.update(f"\0{name}={value}".encode())
    for option in model_options:
        digest.update(f"\0{option!r}".encode())
    folder = files.folder
    local = {p.relative_to(folder).as_posix(): p for p in _model_files(folder)}
    listed = files.listed_weights()  # weight files of a bucket's version
    for rel in sorted(local.keys() | listed.keys(), key=lambda r: r.split("/")):
        if rel in listed:  # the tag changes whenever the content does; the file may be unread
            size, tag = listed[rel]
            digest.update(f"\0{rel}\0{size}\0{tag}".encode())
        else:
            path = local[rel]
            digest.update(f"\0{rel}\0{path.stat().st_size}".encode())
            _sample(digest, path, whole=path.suffix in GRAPH_SUFFIXES)
    return digest.hexdigest()


def extended(name: str, extras: Iterable[object]) -> str:
    """The key of a compile that differs from the one keyed `name` by `extras` (a gathered
    compile: core.runtime.adaptive), without hashing the version's files again."""
    digest = hashlib.blake2b(name.encode(), digest_size=16)
    for extra in extras:
        digest.update(f"\0{extra!r}".encode())
    return digest.hexdigest()


def stamp(files: VersionFiles) -> str:
    """The modification times of the version's local files the key only samples (weights
    over SAMPLES * SAMPLE_BYTES): an overwrite in place of the same size may change only bytes
    between the samples. It names the blobs this host writes for itself, from these very files;
    shipped blobs (OVS_COMPILED_CACHE, .ov-compiled) go by the key alone, since a copy (zip,
    git, download) changes the times. "" when no file is sampled. Read it before the key."""
    folder = files.folder
    listed = files.listed_weights()
    times = []
    for path in _model_files(folder):
        rel = path.relative_to(folder).as_posix()
        info = path.stat()
        sampled = path.suffix not in GRAPH_SUFFIXES and info.st_size > SAMPLES * SAMPLE_BYTES
        if sampled and rel not in listed:
            times.append(f"{rel}\0{info.st_mtime_ns}")
    return "\n".join(times)


def own_name(name: str, stamp: str) -> str:
    """The name of the blob keyed `name` this host writes and reads for itself."""
    return extended(name, ("mtime", stamp)) if stamp else name


def _model_files(folder: Path) -> list[Path]:
    """Every file of the version (SavedModel variables/ too), not the blobs beside them."""
    return sorted(
        p
        for p in folder.rglob("*")
        if p.is_file() and BLOB_FOLDER not in p.relative_to(folder).parts
    )


def _sample(digest: Any, path: Path, whole: bool) -> None:
    size = path.stat().st_size
    with path.open("rb") as handle:
        if whole or size <= SAMPLES * SAMPLE_BYTES:
            digest.update(handle.read())
            return
        step = (size - SAMPLE_BYTES) // (SAMPLES - 1)
        for index in range(SAMPLES):
            handle.seek(index * step)
            digest.update(handle.read(SAMPLE_BYTES))


# -- blobs -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BlobCache:
    """Where versions look for compiled blobs and write them: a value each ModelManager owns
    and passes to the versions it compiles (two managers in one process may differ)."""

    cache_dir: str = ""  # blobs this host writes live in <cache_dir>/blobs ("": none)
    folders: tuple[str, ...] = ()  # read-only blob folders, looked up first (OVS_COMPILED_CACHE)
    export: bool = False  # write a blob to <cache_dir>/blobs after a compile (save_later)

    @property
    def local(self) -> str:
        return str(Path(self.cache_dir) / "blobs") if self.cache_dir else ""

    def find(self, name: str, files: VersionFiles, stamp: str) -> Path | None:
        """The blob named `name`: in the folders, the version's own, this host's (named by
        `stamp` too: see stamp()), the bucket's."""
        shipped = [(base, name) for base in (*self.folders, str(files.folder / BLOB_FOLDER))]
        for base, file_name in (*shipped, (self.local, own_name(name, stamp))):
            if base:
                candidate = Path(base) / f"{file_name}.blob"
                if candidate.is_file():
                    return candidate
        return files.blob(f"{name}.blob")

    def save_later(
        self,
        compiled: ov.CompiledModel,
        name: str,
        stamp: str,
        after: threading.Event | None = None,
        cancelled: Callable[[], bool] = lambda: False,
    ) -> threading.Thread | None:
        """Export to <cache_dir>/blobs/<name>.blob in the background (atomic rename), when
        this cache exports; the file is named by `stamp` too (see stamp()).

        The export takes a core for ~0.3 s on a ResNet-50: it waits for `after` (the version's
        first request done, at most EXPORT_WAIT_S) so that a cold start's first answer does not
        share the CPU with it, and runs at the lowest priority. It gives up if `cancelled()`
        says so by then (the version retired: its blob would only hold the compiled model in
        memory), or if the process exits first; one under way finishes before the exit
        (core.runtime.background)."""
        if not self.local or not self.export:
            return None
        name = own_name(name, stamp)
        target = Path(self.local) / f"{name}.blob"
        if target.exists():
            return None

        def run() -> None:
            if not background.wait(after, EXPORT_WAIT_S) or cancelled():
                return
            _lowest_priority()
            try:
                write(compiled, name, target.parent)
            except (RuntimeError, OSError) as exc:
                log.warning("Could not write compiled blob %s: %s", target, exc)

        return background.start(run, f"export-{name[:8]}")


def load(
    core: ov.Core, path: Path, device: str, properties: dict[str, Any]
) -> tuple[ov.CompiledModel, np.memmap] | None:
    """Import a blob (memory-mapped, copy on write) -> (compiled model, the mapping it reads
    its weights from: keep it alive as long as the model); None when it does not import."""
    try:
        data = np.memmap(path, dtype=np.uint8, mode="c")
    except (OSError, ValueError) as exc:
        log.warning("Compiled blob %s did not import (%s); compiling instead", path, exc)
        return None
    compiled = reimport(core, data, device, properties, str(path))
    return None if compiled is None else (compiled, data)


def reimport(
    core: ov.Core, data: np.memmap, device: str, properties: dict[str, Any], name: str
) -> ov.CompiledModel | None:
    """A compiled model imported from a blob already mapped (`data`) with `properties`; None
    when it does not import. One mapping can serve several imports (on the CPU the hint's
    streams apply at import), so its file pages are resident once for all of them."""
    try:
        return core.import_model(
            ov.Tensor(data, shared_memory=True),
            device,
            {k: v for k, v in properties.items() if k != "CACHE_DIR"},
        )
    except (RuntimeError, OSError, ValueError) as exc:
        log.warning("Compiled blob %s did not import (%s); compiling instead", name, exc)
        return None


def _lowest_priority() -> None:
    """Nice 19 for the calling thread only (Linux counts niceness per thread)."""
    with contextlib.suppress(AttributeError, OSError):  # not Linux: normal priority
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)


def write(compiled: ov.CompiledModel, name: str, folder: Path) -> Path:
    """Export now to folder/<name>.blob (atomic); for baking blobs into an image or a bucket."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{name}.blob"
    blob = compiled.export_model()
    handle, temp = tempfile.mkstemp(dir=folder, suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(blob.getbuffer() if hasattr(blob, "getbuffer") else blob)
        os.replace(temp, target)
    except BaseException:  # no partial file left behind, whatever stopped the write
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    return target


def export_manager(manager: Any, folder: Path, per_version: bool = False) -> list[Path]:
    """Blobs of every AVAILABLE model version a ModelManager serves, into `folder` (flat, for
    OVS_COMPILED_CACHE), or with `per_version` into folder/<model>/<version>/.ov-compiled/,
    the place a repository or bucket holds them. `ov-serverless export-blobs` runs it with the
    server's settings; run it on the kind of CPU that will serve, from the same model paths
    (a bucket's version is keyed by its listing)."""
    written = []
    for served in manager.models.values():
        for number, version in sorted(served.versions.items()):
            into = folder / served.name / str(number) / BLOB_FOLDER if per_version else folder
            written.extend(version.export_blobs(into))
    return written
