"""Source ``logits``: a user's own logits archive, validated and copied into the cache."""

from __future__ import annotations

from pathlib import Path

from calibrepro.download import sha256_of
from calibrepro.io import LogitsFileError, load_logits, save_logits
from calibrepro.zoo import LogitsRequest, Source


class BringYourOwnLogits(Source):
    """Logits computed elsewhere: ``{source: logits, path: file.npz}`` with arrays ``logits`` (N, K), ``labels`` (N,)."""

    name = "logits"

    def check(self, dataset: str, model: str, spec: dict, config: dict) -> None:
        path = Path(spec["path"])
        if not path.is_file():
            raise LogitsFileError(
                f"models.{dataset}.{model}.path: {path} does not exist; point it to an .npz file "
                "with arrays 'logits' (N, K) and 'labels' (N,)"
            )

    def cache_logits(self, request: LogitsRequest, output: Path) -> None:
        path = Path(request.spec["path"])
        archive = load_logits(path)
        metadata = {
            "source": self.name,
            "path": str(path.resolve()),
            "sha256": sha256_of(path),
            "original_metadata": archive.metadata,
        }
        save_logits(output, archive.logits, archive.labels, metadata)
