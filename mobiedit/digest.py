"""One streaming sha256 of files, for every checksum the project writes or checks (bundle
manifests, converted checkpoints, corpora, the key-statistics cache key)."""
from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable

CHUNK = 1 << 20


def update_with_file(h: "hashlib._Hash", path: str | os.PathLike) -> None:
    """Feed the bytes of ``path`` to ``h`` in 1 MiB chunks (bounded memory for any file size)."""
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(CHUNK), b""):
            h.update(chunk)


def files_sha256(paths: Iterable[str | os.PathLike]) -> str:
    """Hex sha256 of the concatenated bytes of ``paths``, in the order given."""
    h = hashlib.sha256()
    for p in paths:
        update_with_file(h, p)
    return h.hexdigest()
