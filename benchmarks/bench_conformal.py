"""Time conformal prediction sets at the thesis's shapes, ours against TorchCP and MAPIE where installed.

Synthetic overconfident probabilities of a test half (K = 10 and 100: 5,000 rows; K = 1000: 25,000 rows, the
ImageNet test half) split in two: one part fits the threshold, the other gets its sets. Two timings:

* **fit + predict**: one :class:`calibrepro.conformal.ConformalClassifier` (non-randomised, so that TorchCP's
  ``randomized=False`` and MAPIE compute the same sets; the sets are checked equal before timing) against
  TorchCP 1.2's ``SplitPredictor`` (``calculate_threshold`` + ``predict_with_logits``, ``score_type="identity"``)
  and MAPIE 1.6's ``SplitConformalClassifier`` (``conformalize`` + ``predict_set``; prefit on the rows);
* **what the pipeline's job does per calibrator**: :func:`calibrepro.conformal.metrics.evaluate_repeats` for 3
  scores x 2 alphas x 10 repeats (randomised), the rows sorted once for all of them (into the memory of the
  previous calibrator's table, as the job does).

    .venv/bin/python benchmarks/bench_conformal.py [--classes 10,100,1000] [--repeat 3]

Times are the best of ``--repeat`` runs, one thread per library (``torch.set_num_threads(1)``, NumPy's pinned
kernels).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
import time
import types

import numpy as np

from calibrepro.calibrators.base import softmax
from calibrepro.conformal import ConformalClassifier
from calibrepro.conformal.metrics import evaluate_repeats
from calibrepro.conformal.scores import rank_table
from calibrepro.conformal.splits import make_conformal_splits

ROWS = {10: 5_000, 100: 5_000, 1000: 25_000}


def probabilities(k: int, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % k
    logits = rng.normal(size=(n, k))
    hit = rng.random(n) < 0.8
    logits[np.arange(n), np.where(hit, labels, rng.integers(0, k, n))] += rng.gamma(4.0, 1.0, n)
    return softmax(2.5 * logits, "float64"), labels


def best(function, repeat: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return min(times), result


def torchcp_modules():
    """TorchCP's classification scores and predictors, without its package ``__init__`` (tests/test_conformal_libraries.py
    says why), or None."""
    if "torchcp" not in sys.modules:  # loaded once: again, its stand-in package (below) has no spec
        spec = importlib.util.find_spec("torchcp")
        if spec is None:
            return None
        try:
            importlib.import_module("torchcp")
        except ImportError:
            root = os.path.dirname(spec.origin)
            for name, folder in (("torchcp", root), ("torchcp.classification", os.path.join(root, "classification"))):
                package = types.ModuleType(name)
                package.__path__ = [folder]
                sys.modules[name] = package
    return (importlib.import_module("torchcp.classification.score"),
            importlib.import_module("torchcp.classification.predictor"))


def torchcp_sets(modules, score: str, p: np.ndarray, labels: np.ndarray, half: int):
    import torch

    scores, predictors = modules
    function = scores.LAC(score_type="identity") if score == "lac" else scores.APS(score_type="identity",
                                                                                    randomized=False)
    predictor = predictors.SplitPredictor(function, alpha=0.1)
    predictor.calculate_threshold(torch.from_numpy(p[:half]), torch.from_numpy(labels[:half]), 0.1)
    return predictor.predict_with_logits(torch.from_numpy(p[half:])).numpy().astype(bool)


class FixedProbabilities:
    """A prefit scikit-learn classifier whose input is a row index into fixed probabilities (MAPIE's estimator)."""

    _estimator_type = "classifier"

    def __init__(self, p):
        self.p, self.classes_, self.n_features_in_ = p, np.arange(p.shape[1]), 1

    def fit(self, X, y):
        return self

    def predict_proba(self, X):
        return self.p[np.asarray(X)[:, 0].astype(int)]

    def predict(self, X):
        return self.predict_proba(X).argmax(axis=1)

    def __sklearn_is_fitted__(self):
        return True


def mapie_sets(score: str, p: np.ndarray, labels: np.ndarray, half: int):
    from mapie.classification import SplitConformalClassifier

    rows = np.arange(len(p))[:, None]
    model = SplitConformalClassifier(FixedProbabilities(p), confidence_level=0.9, conformity_score=score, prefit=True,
                                     random_state=0)
    model.conformalize(rows[:half], labels[:half])
    params = {"include_last_label": False} if score == "aps" else None
    return model.predict_set(rows[half:], conformity_score_params=params)[1][:, :, 0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--classes", default="10,100,1000", help="numbers of classes, comma-separated")
    parser.add_argument("--repeat", type=int, default=3, help="runs per timing (the best is printed)")
    args = parser.parse_args()
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        pass
    torchcp = torchcp_modules()
    has_mapie = importlib.util.find_spec("mapie") is not None
    print(f"TorchCP: {'yes' if torchcp else 'not installed'}; MAPIE: {'yes' if has_mapie else 'not installed'}; "
          f"best of {args.repeat}; seconds")
    for k in map(int, args.classes.split(",")):
        n = ROWS.get(k, 5_000)
        p, labels = probabilities(k, n)
        half = n // 2
        for score in ("lac", "aps"):
            def ours():
                return ConformalClassifier(score, 0.1, randomized=False).fit(p[:half], labels[:half]).predict(p[half:])

            seconds, sets = best(ours, args.repeat)
            line = f"K = {k:>4}, N = {n:>6}, {score.upper():<4} fit + predict: ours {seconds:.3f}"
            for name, available, run in (("TorchCP", torchcp is not None, lambda: torchcp_sets(torchcp, score, p, labels, half)),
                                         ("MAPIE", has_mapie, lambda: mapie_sets(score, p, labels, half))):
                if not available:
                    continue
                theirs, their_sets = best(run, args.repeat)
                differ = int(np.count_nonzero(sets != their_sets))
                same = "same sets" if not differ else f"{differ} of {sets.size} entries differ" + (
                    ": MAPIE randomises its APS calibration scores" if name == "MAPIE" and score == "aps" else
                    ": MAPIE compares with a tolerance" if name == "MAPIE" else "")
                line += f"; {name} {theirs:.3f} (ours / theirs {seconds / theirs:.2f}, {same})"
            print(line)
        calibration, test = make_conformal_splits(labels, np.arange(n), 10, 0.5, seed=0)

        held = [rank_table(p, labels)]  # the job's tables reuse one table's memory (scores.rank_table)

        def table():
            held[0] = rank_table(p, labels, reuse=held[0])
            return held[0]

        def job():  # what the conformal step does per calibrator: one sort, then every score, alpha and repeat
            ranks = table()
            for score in ("lac", "aps", "raps"):
                evaluate_repeats(p, labels, calibration, test, score=score, alphas=[0.1, 0.05], table=ranks)

        sort, _ = best(table, args.repeat)
        total, _ = best(job, args.repeat)
        print(f"K = {k:>4}, N = {n:>6}: one calibrator in the pipeline's job (3 scores x 2 alphas x 10 repeats): "
              f"{total:.2f} (its sort {sort:.2f}); x 6 calibrators: {6 * total:.1f}")


if __name__ == "__main__":
    main()
