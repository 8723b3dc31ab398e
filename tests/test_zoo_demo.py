"""The demo source: digits split, deterministic training, logits archive."""

import numpy as np
import pytest

from calibrepro.io import load_logits
from calibrepro.zoo import LogitsRequest, get_source
from calibrepro.zoo.digits_training import digits_parts, train_and_predict

SETTINGS = {"datasets": {"digits": {"evaluation_fraction": 0.5, "seed": 0}}, "downloads": {}, "inference": {}}


def test_digits_parts_are_stratified_halves_of_all_digits():
    x_train, y_train, x_eval, y_eval = digits_parts(0.5, seed=0)
    assert (len(y_train), len(y_eval)) == (898, 899)  # 1,797 digits in all
    assert x_train.dtype == np.float32 and x_train.max() <= 1.0 and x_train.min() >= 0.0
    assert np.all(np.abs(np.bincount(y_train) - np.bincount(y_eval)) <= 1)


def test_training_is_deterministic_and_label_smoothing_softens_confidence():
    options = {"hidden": [32], "epochs": 40}
    first, labels, metadata = train_and_predict(options, 0.5, 0)
    second, _, _ = train_and_predict(options, 0.5, 0)
    assert first.tobytes() == second.tobytes()
    assert metadata["options"]["hidden"] == [32] and metadata["digits"]["train_size"] == 898
    assert (first.argmax(axis=1) == labels).mean() > 0.9

    smoothed, _, _ = train_and_predict({**options, "label_smoothing": 0.2}, 0.5, 0)

    def mean_confidence(z):
        p = np.exp(z - z.max(axis=1, keepdims=True))
        return (p.max(axis=1) / p.sum(axis=1)).mean()

    assert mean_confidence(smoothed) < mean_confidence(first) - 0.05


def test_source_writes_the_archive_and_rejects_other_data_sets(tmp_path):
    source = get_source("demo")
    request = LogitsRequest("digits", "tiny", {"source": "demo", "hidden": [], "epochs": 3}, SETTINGS)
    source.cache_logits(request, tmp_path / "tiny.npz")
    archive = load_logits(tmp_path / "tiny.npz")
    assert archive.logits.shape == (899, 10)
    assert archive.metadata["source"] == "demo" and archive.metadata["options"]["epochs"] == 3
    with pytest.raises(ValueError, match="models.cifar10.tiny: source 'demo' trains on the 'digits' data set only"):
        source.check("cifar10", "tiny", {"source": "demo"}, SETTINGS)
