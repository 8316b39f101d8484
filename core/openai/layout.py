"""OVMS's export layout without version folders: `<base>/graph.pbtxt`, `openvino_model.xml`,
... served as version 1, as OVMS serves a graph folder (local repositories)."""

from __future__ import annotations

from core.storage import Repository, VersionFiles
from core.storage.local import LocalRepository, folder_fingerprint

MODEL_FILE = "openvino_model.xml"  # the transformer
TOKENIZER_FILE = "openvino_tokenizer.xml"
MARKERS = ("graph.pbtxt", MODEL_FILE)


class FlatFolder:
    """A local repository whose base holds one version's files directly; a base with numeric
    version folders is served as those versions, as any repository."""

    def __init__(self, inner: LocalRepository) -> None:
        self.inner = inner
        self.url = inner.url

    def _flat(self) -> bool:
        return any((self.inner.base / name).is_file() for name in MARKERS)

    def versions(self) -> dict[int, str]:
        found = self.inner.versions()
        if found or not self._flat():
            return found
        fingerprint = folder_fingerprint(self.inner.base)
        return {1: fingerprint} if fingerprint is not None else {}

    def fetch(self, version: int) -> VersionFiles:
        if version == 1 and self._flat() and not self.inner.versions():
            return VersionFiles(self.inner.base)
        return self.inner.fetch(version)

    def release(self, files: VersionFiles) -> None:
        """The user's own files: never deleted."""


def flat_aware(repository: Repository) -> Repository:
    return FlatFolder(repository) if isinstance(repository, LocalRepository) else repository
