"""Source ``demo``: small torch classifiers trained on scikit-learn's bundled 8x8 digits.

The embedded default configuration uses it so that a fresh clone runs the whole pipeline
offline in seconds. The 1,797 digits are split (stratified, seeded) into a training part and
an evaluation part; each model is trained on the first and its logits are cached on the second,
which the pipeline then splits into calibration and test halves like any other data set.
"""

from __future__ import annotations

from pathlib import Path

from calibrepro.io import save_logits
from calibrepro.zoo import LogitsRequest, Source


class DemoClassifier(Source):
    """Train a small classifier on the digits' training part; cache its logits on the evaluation part."""

    name = "demo"

    def check(self, dataset: str, model: str, spec: dict, config: dict) -> None:
        if dataset != "digits":
            raise ValueError(
                f"models.{dataset}.{model}: source 'demo' trains on the 'digits' data set only; "
                "put the model under models.digits"
            )

    def cache_logits(self, request: LogitsRequest, output: Path) -> None:
        from calibrepro.zoo.digits_training import train_and_predict

        self.check(request.dataset, request.model, request.spec, request.config)
        digits = request.config.get("datasets", {}).get("digits", {})
        options = {key: value for key, value in request.spec.items() if key != "source"}
        logits, labels, metadata = train_and_predict(
            options, digits.get("evaluation_fraction", 0.5), digits.get("seed", 0)
        )
        save_logits(output, logits, labels, {"source": self.name, **metadata})
