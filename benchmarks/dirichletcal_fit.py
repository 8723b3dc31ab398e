"""One fit of the ``dirichletcal`` package (Kull et al.'s code), run by ``bench_calibrators.py --dirichletcal-python``.

Runs under any Python that has numpy and dirichletcal (which needs Python >= 3.12, a separate
environment from the project's), so it imports nothing from calibrepro::

    PYTHON dirichletcal_fit.py IN.npz OUT.npz

``IN.npz`` holds ``features`` (probabilities for Dir-L2/Dir-ODIR, logits for MS-ODIR), ``labels``,
``method``, ``lam``, ``mu``; ``OUT.npz`` gets ``weights`` (K x K), ``bias`` (K), ``seconds`` and
``version``.  The fit is dirichletcal's with ``reg_norm=True, ref_row=False`` (whose objective is
exactly calibrepro's) and its L-BFGS-B optimizer (``optimizer="fmin_l_bfgs_b"``).
"""

from __future__ import annotations

import sys
import time
from importlib import metadata

import numpy as np


def main(source: str, target: str) -> None:
    from dirichletcal.calib.fulldirichlet import FullDirichletCalibrator
    from dirichletcal.calib.multinomial import MultinomialRegression

    with np.load(source, allow_pickle=False) as data:
        features, labels = data["features"], data["labels"]
        method, lam, mu = str(data["method"]), float(data["lam"]), float(data["mu"])
    common = {"reg_lambda": lam, "reg_mu": None if method == "dirichlet_l2" else mu, "reg_norm": True, "ref_row": False}
    start = time.perf_counter()
    if method == "matrix_scaling_odir":
        weights = MultinomialRegression(method="Full", optimizer="fmin_l_bfgs_b", **common).fit(features, labels).weights_
    else:
        weights = FullDirichletCalibrator(optimizer="fmin_l_bfgs_b", **common).fit(features, labels).weights
    seconds = time.perf_counter() - start
    weights = np.asarray(weights, dtype=np.float64)
    np.savez(target, weights=weights[:, :-1], bias=weights[:, -1], seconds=seconds,
             version=metadata.version("dirichletcal"))


if __name__ == "__main__":
    main(*sys.argv[1:3])
