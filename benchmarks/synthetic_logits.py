"""Synthetic logits that miscalibrate like real networks' (issue 33): accuracy, overconfidence, similar classes.

:func:`realistic` draws a calibration and a test half of the thesis's shapes.  Each class ``j``
has a prototype ``u_j``, a random unit vector in ``R^d``: classes with close prototypes are
similar.  A sample of class ``c`` (uniform) has the latent ``h = u_c + sigma xi / sqrt(d)``; its
true log-posterior is ``g = beta U h + tau eps`` (``eps`` standard normal per class) and its label is
drawn from ``softmax(g)``, so ``softmax(g)`` is calibrated exactly.  The network's logits distort
``g`` as trained networks do:

* every class is overconfident, each by its own factor ``s_j = over * exp(N(0, 0.05^2))``, and has an
  offset ``N(0, 0.1^2)`` (vector scaling with bias can undo these);
* each class also takes ``0.1`` of the evidence ``g`` of its ``3`` most similar classes (a sparse
  off-diagonal map that only the full-matrix methods can undo).

The settings per K were chosen so that, as on real networks, temperature scaling gains about 9 % of
NLL over the uncalibrated model and the full-matrix methods gain little more.  Measured on the
calibration/test halves (5,000 + 5,000 at K = 100, seed 0): accuracy 70.0 %, test NLL uncalibrated
1.2643, TS 1.1448, VS 1.1253, MS-ODIR 1.1253, Dir-ODIR 1.1350 (real CIFAR-100 resnet20: 1.2335,
1.1279, 1.1264, 1.1237, 1.1293; issue 33).  The simpler ``bench_calibrators.synthetic`` (one boosted
class in Gaussian noise) has no similar classes and no per-class distortion, so the full-matrix
methods can only lose on it.
"""

from __future__ import annotations

import numpy as np

#: per number of classes: latent dimension ``d``, evidence scale ``beta``, per-class noise ``tau``,
#: overconfidence ``over`` (other K take the settings of the nearest K on a log scale)
SETTINGS = {
    100: {"dim": 16, "beta": 10.0, "tau": 1.0, "over": 1.25},
    1000: {"dim": 32, "beta": 13.0, "tau": 0.8, "over": 1.15},
}
#: the latent noise, the per-class spread of overconfidence and offsets, the evidence taken from similar classes
_SIGMA, _SPREAD, _OFFSET, _LEAK, _NEIGHBOURS = 0.8, 0.05, 0.1, 0.1, 3


def realistic(k: int, n: int, seed: int = 0):
    """``((logits, labels), (logits, labels))``: calibration and test halves of ``n`` samples each, K = ``k``.

    Logits float32, labels int64; the same ``(k, n, seed)`` give the same arrays on every machine
    (numpy's PCG64 streams and float64 arithmetic, rounded to float32 at the end).
    """
    nearest = min(SETTINGS, key=lambda size: abs(np.log(size / k)))
    dim, beta, tau, over = (SETTINGS[nearest][key] for key in ("dim", "beta", "tau", "over"))
    rng = np.random.default_rng([seed, k, 33])
    prototypes = rng.standard_normal((k, dim))
    prototypes /= np.linalg.norm(prototypes, axis=1, keepdims=True)
    scale = over * np.exp(rng.normal(0.0, _SPREAD, k))
    offset = rng.normal(0.0, _OFFSET, k)
    similarity = prototypes @ prototypes.T - 2.0 * np.eye(k)  # a class is not its own neighbour
    leak = np.zeros((k, k))
    np.put_along_axis(leak, np.argsort(-similarity, axis=1, kind="stable")[:, :_NEIGHBOURS], _LEAK, axis=1)

    def half():
        classes = rng.integers(0, k, n)
        latent = prototypes[classes] + _SIGMA * rng.standard_normal((n, dim)) / np.sqrt(dim)
        evidence = beta * latent @ prototypes.T + tau * rng.standard_normal((n, k))
        posterior = np.exp(evidence - evidence.max(axis=1, keepdims=True))
        posterior /= posterior.sum(axis=1, keepdims=True)
        labels = np.minimum((posterior.cumsum(axis=1) < rng.random(n)[:, None]).sum(axis=1), k - 1)
        logits = evidence * scale + offset + evidence @ leak.T
        return logits.astype(np.float32), labels.astype(np.int64)

    return half(), half()
