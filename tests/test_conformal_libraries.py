"""The non-randomised LAC and APS sets equal TorchCP's and MAPIE's on the same probabilities (MAPIE's APS: at the
same threshold, see the test).

Neither library is a dependency: `pip install mapie torchcp` (the `compare` extra of pyproject.toml) makes these
tests run; without them they are skipped. TorchCP 1.2's package ``__init__`` imports its graph and language-model
parts (torch_geometric, transformers, torchsort, a compiled extension), which its classification scores do not
use: where those are missing, benchmarks/bench_conformal.py loads ``torchcp.classification.score`` and ``.predictor`` without the two
package ``__init__`` files above them.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from calibrepro.calibrators.base import softmax
from calibrepro.conformal import ConformalClassifier
from calibrepro.conformal.scores import label_ranks, rank_order, sorted_scores
from workflow_helpers import ROOT

ALPHAS = (0.1, 0.05)


def probabilities(n=3000, k=10, seed=0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    return softmax(2 * rng.standard_normal((n, k)) + 3 * np.eye(k)[labels], "float64"), labels


def ours(score, alpha, p, labels):
    return ConformalClassifier(score, alpha, randomized=False).fit(p[:1500], labels[:1500]).predict(p[1500:])


def _bench_conformal():
    """benchmarks/bench_conformal.py, whose MAPIE adapter (``FixedProbabilities``) the tests share."""
    spec = importlib.util.spec_from_file_location("bench_conformal", ROOT / "benchmarks" / "bench_conformal.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FixedProbabilities = _bench_conformal().FixedProbabilities


def mapie_sets(score, alpha, p, labels, calibration_scores=None, **params):
    """MAPIE's sets of rows 1500: after conformalising on rows :1500 (``calibration_scores``: those scores replaced)."""
    mapie = pytest.importorskip("mapie.classification")
    rows = np.arange(len(p))[:, None]
    model = mapie.SplitConformalClassifier(FixedProbabilities(p), confidence_level=1 - alpha, conformity_score=score,
                                           prefit=True, random_state=0)
    model.conformalize(rows[:1500], labels[:1500])
    if calibration_scores is not None:
        stored = model._mapie_classifier.conformity_scores_
        model._mapie_classifier.conformity_scores_ = calibration_scores.reshape(stored.shape)
    return model.predict_set(rows[1500:], conformity_score_params=params or None)[1][:, :, 0]


@pytest.mark.parametrize("alpha", ALPHAS)
def test_lac_sets_equal_mapie(alpha):
    p, labels = probabilities()
    np.testing.assert_array_equal(ours("lac", alpha, p, labels), mapie_sets("lac", alpha, p, labels))


@pytest.mark.parametrize("alpha", ALPHAS)
def test_aps_sets_equal_mapie_at_the_same_threshold(alpha):
    """MAPIE 1.6 randomises APS's calibration scores whatever ``include_last_label`` says (``get_conformity_scores``
    subtracts u p_y), so its threshold is the randomised one; given the deterministic calibration scores, its
    quantile and ``include_last_label=False`` sets are ours, except that MAPIE never returns an empty set (it
    keeps the top label where the deterministic set is empty)."""
    p, labels = probabilities()
    cp = ConformalClassifier("aps", alpha, randomized=False).fit(p[:1500], labels[:1500])
    expected = cp.predict(p[1500:])
    empty = ~expected.any(axis=1)
    expected[empty, p[1500:][empty].argmax(axis=1)] = True
    assert empty.any()  # the exception is exercised
    order = rank_order(p[:1500])
    scores = sorted_scores(p[:1500], order, "aps", None)[np.arange(1500), label_ranks(order, labels[:1500])]
    got = mapie_sets("aps", alpha, p, labels, calibration_scores=scores, include_last_label=False)
    np.testing.assert_array_equal(expected, got)


def torchcp_classification():
    """``(score module, predictor module)`` of TorchCP's classification part (module docstring), or a skip."""
    pytest.importorskip("torch")
    modules = _bench_conformal().torchcp_modules()
    if modules is None:
        pytest.skip("torchcp is not installed")
    return modules


@pytest.mark.parametrize("score", ["lac", "aps"])
@pytest.mark.parametrize("alpha", ALPHAS)
def test_sets_equal_torchcp(score, alpha):
    import torch

    scores, predictors = torchcp_classification()
    p, labels = probabilities(seed=1)
    function = scores.LAC(score_type="identity") if score == "lac" else scores.APS(score_type="identity",
                                                                                    randomized=False)
    predictor = predictors.SplitPredictor(function, alpha=alpha)
    predictor.calculate_threshold(torch.from_numpy(p[:1500]), torch.from_numpy(labels[:1500]), alpha)
    sets = predictor.predict_with_logits(torch.from_numpy(p[1500:])).numpy().astype(bool)
    np.testing.assert_array_equal(ours(score, alpha, p, labels), sets)
