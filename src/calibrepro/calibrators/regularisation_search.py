"""The cross-validated choice of ``(lambda, mu)`` of the full-matrix calibrators: a path that brackets its optimum.

Kull et al. (2019, sec. 5) choose the regularisation strengths by K-fold cross-validation over a
grid.  A grid alone can stop at its own edge: issue 33 found every CIFAR-100 fit choosing the
strongest grid point (lambda = 100), with test NLL worse than not calibrating, where wider grids
found optima at lambda = 1e2-1e5.  This search therefore makes sure the chosen point is a
bracketed optimum of the held-out NLL or the regulariser's limit:

1. **The grid's path.**  Lambdas from strong to weak; at each lambda every mu, from strong to weak;
   each point starts from its stronger neighbour's solution (:func:`grid_path`).
   With ``early_stop`` the path ends at the first lambda whose best score is worse than the best so
   far by more than the tolerance ``plateau`` (relative): the weaker lambdas, the costliest fits,
   are skipped.  The tolerance keeps noise at the strong end, where the scores are flat to the last
   digits, from ending the path before it reaches the optimum.
2. **Lambda beyond the grid.**  If the best point's lambda is the grid's largest, levels ``lambda
   * r, lambda * r^2, ...`` (``r`` the ratio of the grid's two largest lambdas; 10 if the second is 0)
   are added, every mu of the grid at each, each point starting from the same mu one level back;
   if it is the grid's smallest (> 0), ``lambda / r, ...`` likewise (``r`` from the two smallest).
   The extension stops at the first level that does not improve the best score by more than
   ``plateau``: either it scores worse (the optimum is bracketed) or the scores have reached the
   regulariser's limit (ODIR: lambda -> infinity makes ``W`` diagonal, vector scaling on the
   features; Dir-L2: ``W, b`` tend to their target, the identity map or the uniform one).  No value
   is added above the grid where its two largest values already score alike (within ``plateau``):
   the penalty's limit is reached inside the grid (at K = 100 every mu >= 1 scores alike to 3e-5,
   issue 33's study).  Below the grid a tie says nothing about weaker values, so there it is tried.
3. **Mu beyond the grid**, at the chosen lambda, in the same way (ODIR only).

Each direction adds at most ``max_extensions`` values; when the last one still improved the score
by more than ``plateau``, the search is **capped**: the best point sits at the edge of what was
searched (``capped`` in the record; the calibrator's ``diagnostics_["search_capped"]``).  Every
point fitted beyond the grid is recorded in order with its score, its stage and its fits' work.
The scores are the held-out mean NLL summed over the folds in fold order, so the choice is the
same on every machine and for any number of threads.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numpy as np

#: relative change of the CV score below which two scores count as equal (the path's early stop, the
#: extensions' stop): scores at the regulariser's limit agree to ~1e-6 relative, an optimum bracketed
#: on a 10x ladder is 1e-3 to 1e-2 lower than its neighbours (benchmarks/MEASUREMENTS.md, issue 33's study)
PLATEAU = 1e-4
#: the ratio of an extension when the grid's neighbouring value is 0 (or the axis has one value)
_DEFAULT_RATIO = 10.0

#: ``solve(fold, (lambda, mu), start)`` fits one point on one fold's training part from ``start`` (a
#: previous solution of the same fold, or None: the identity map) and returns ``(solution, info,
#: held-out NLL sum)``, ``info`` with the fit's ``converged``, ``n_iter`` and ``n_hessp``
Solve = Callable[[int, tuple[float, float], object], tuple[object, dict, float]]


def grid_path(lambdas, mus) -> list[list[tuple[tuple[float, float], tuple[float, float] | None]]]:
    """The grid ``lambdas x mus`` as the path's levels: per lambda (strong to weak) its points, mus strong to weak.

    Each point comes with the point it starts from: the next stronger mu of its lambda; the first mu
    of a lambda from the first point of the next stronger lambda (the strongest point: None, the
    identity map).
    """
    levels, previous_first = [], None
    ordered_mus = sorted(set(mus), reverse=True)
    for lam in sorted(set(lambdas), reverse=True):
        level = [((lam, ordered_mus[0]), previous_first)]
        level += [((lam, mu), (lam, before)) for before, mu in zip(ordered_mus, ordered_mus[1:])]
        levels.append(level)
        previous_first = (lam, ordered_mus[0])
    return levels


class RegularisationSearch:
    """The search over ``lambdas x mus`` on ``folds`` folds of ``n`` samples (module docstring).

    After :meth:`run`: :attr:`scores` (point -> CV score of every fitted point), :attr:`solutions`
    (per fold, point -> solution), :attr:`best` (the chosen point), :attr:`capped`, and
    :meth:`record` (the JSON record of the grid and the extension).
    """

    def __init__(
        self,
        lambdas,
        mus,
        *,
        folds: int,
        n: int,
        solve: Solve,
        early_stop: bool = True,
        max_extensions: int = 4,
        threads: int = 1,
        plateau: float = PLATEAU,
    ):
        self.grid = [(float(lam), float(mu)) for lam in lambdas for mu in mus]
        self.lambdas = sorted({lam for lam, _ in self.grid})
        self.mus = sorted({mu for _, mu in self.grid})
        self.folds, self.n, self.solve = int(folds), int(n), solve
        self.early_stop, self.max_extensions = bool(early_stop), int(max_extensions)
        self.threads, self.plateau = max(1, min(int(threads), int(folds))), float(plateau)
        self.scores: dict[tuple[float, float], float] = {}
        self.infos: dict[tuple[float, float], list[dict]] = {}
        self.solutions: list[dict] = [{} for _ in range(self.folds)]
        self.extension: list[dict] = []
        self.stops: list[str] = []
        self.capped = False
        # tie-break order: a point's first place in the grid, then the extension's order
        self._order: dict[tuple[float, float], int] = {point: i for i, point in reversed(list(enumerate(self.grid)))}

    # --- the search ----------------------------------------------------------------------------
    def run(self) -> "RegularisationSearch":
        """Fit the grid's path, then extend lambda and mu where the best point sits at an end."""
        with ThreadPoolExecutor(self.threads) as pool:
            self._pool = pool
            best_so_far = np.inf
            for level in grid_path(self.lambdas, self.mus):
                best_here = min(self._fit(level))
                if self.early_stop and self._worse(best_here, best_so_far):
                    break
                best_so_far = min(best_so_far, best_here)
            self._extend("lambda")
            self._extend("mu")
        return self

    def _extend(self, axis: str) -> None:
        """Add values beyond the end of ``axis`` ("lambda" or "mu") where the best point sits (module docstring)."""
        values = self.lambdas if axis == "lambda" else self.mus
        if len(values) < 2:  # a single value: the user fixed it
            return
        lam, mu = self.best
        at = lam if axis == "lambda" else mu
        if at == values[-1]:
            direction, ratio, inner = "above", values[-1] / values[-2] if values[-2] > 0 else _DEFAULT_RATIO, values[-2]
        elif at == values[0] and at > 0:
            direction, ratio, inner = "below", 1.0 / (values[1] / values[0]), values[1]
        else:
            return
        stage = f"{axis} {direction} the grid"
        best_score, previous = self.scores[self.best], at
        neighbour = (inner, mu) if axis == "lambda" else (lam, inner)
        if direction == "above" and not self._worse(self.scores[neighbour], best_score):
            self.stops.append(f"{stage}: not extended, {axis} = {inner:g} and {at:g} score alike: the limit is reached")
            return
        for step in range(1, self.max_extensions + 1):
            value = float(f"{at * ratio**step:.12g}")  # 1e-06, not 1.0000000000000002e-06
            if axis == "lambda":
                level = [((value, m), (previous, m)) for m in reversed(self.mus) if (previous, m) in self.scores]
            else:
                level = [((lam, value), (lam, previous))]
            for point, _ in level:
                self._order[point] = len(self.grid) + len(self._order)
            scores = self._fit(level)
            self.extension += [{"stage": stage, **self._entry(point)} for point, _ in level]
            if not min(scores) < best_score * (1.0 - self.plateau):
                worse = self._worse(min(scores), best_score)
                self.stops.append(
                    f"{stage}: {axis} = {value:g} "
                    + ("scored worse: the optimum is bracketed" if worse else "changed the score by less than the tolerance: the limit is reached")
                )
                return
            best_score, previous = min(scores), value
        self.capped = True
        self.stops.append(
            f"{stage}: capped after max_extensions = {self.max_extensions} values; the best score is still at {axis} = {previous:g}"
        )

    def _fit(self, level) -> list[float]:
        """Fit ``level``'s points (each from its start) on every fold, folds in threads; their CV scores."""
        sums = [[0.0] * len(level) for _ in range(self.folds)]
        infos = [[None] * len(level) for _ in range(self.folds)]

        def run(fold: int) -> None:
            for j, (point, start) in enumerate(level):
                begin = self.solutions[fold][start] if start is not None else None
                self.solutions[fold][point], infos[fold][j], sums[fold][j] = self.solve(fold, point, begin)

        list(self._pool.map(run, range(self.folds)))
        scores = []
        for j, (point, _) in enumerate(level):
            self.scores[point] = sum(sums[fold][j] for fold in range(self.folds)) / self.n  # fold order: a fixed sum
            self.infos[point] = [infos[fold][j] for fold in range(self.folds)]
            scores.append(self.scores[point])
        return scores

    def _worse(self, score: float, best: float) -> bool:
        """``score`` exceeds ``best`` by more than the relative tolerance."""
        return score > best + self.plateau * abs(best)

    # --- results ---------------------------------------------------------------------------------
    @property
    def best(self) -> tuple[float, float]:
        """The fitted point with the lowest score; ties go to the earlier point (grid order, then the extension's)."""
        return min(self.scores, key=lambda point: (self.scores[point], self._order[point]))

    @property
    def converged(self) -> bool:
        """Whether every fit of the search converged."""
        return all(info["converged"] for infos in self.infos.values() for info in infos)

    def _entry(self, point) -> dict:
        fitted = point in self.scores
        infos = self.infos.get(point, [])
        return {
            "lambda": point[0],
            "mu": point[1],
            "cv_nll": self.scores[point] if fitted else None,
            "converged": all(info["converged"] for info in infos) if fitted else None,
            "newton_iterations": [info["n_iter"] for info in infos] if fitted else None,
            "hessian_products": sum(info["n_hessp"] for info in infos) if fitted else None,
        }

    def record(self) -> dict:
        """The JSON record: the grid's points (None where the path's early stop skipped them), the extension in order."""
        return {
            "grid": [self._entry(point) for point in self.grid],
            "extension": self.extension,
            "search": {
                "max_extensions": self.max_extensions,
                "plateau": self.plateau,
                "stops": self.stops,
                "capped": self.capped,
            },
        }
