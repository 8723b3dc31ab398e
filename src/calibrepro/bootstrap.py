"""Bootstrap replicates of every metric over the test half, computed from multinomial counts.

A bootstrap resample of the N test samples is a vector of counts ``w`` (how often each sample is
drawn; ``sum w = N``), and the resample, as a multiset, is ``np.repeat(arange(N), w)``.  Every
metric of :data:`calibrepro.metrics.METRICS` is a function of weighted sums over samples, so the
B resamples of one block are one ``(b, N)`` count matrix ``W`` and each metric needs only a few
matrix products with quantities computed once per method:

* accuracy, Brier, NLL: ``W @ terms / N`` with the per-sample contributions;
* ECE, MCE, ECE-l2 (equal-width bins): ``W @ [onehot, onehot * conf, onehot * correct]`` gives the
  per-bin counts, confidence sums and correct counts of every resample;
* classwise-ECE: per-(class, bin) sums ``W @ S`` with a sparse matrix of the entries above the
  first bin edge, plus ``W @ P`` for the first bin (most entries), and the positives ``W @ Y``;
* equal-mass ECE/MCE and debiased ECE-l2: the bins follow the resample's own order statistics.
  The samples are sorted once by confidence; in that order a resample's sorted sequence repeats
  sample s ``w_s`` times, so the cumulative sums of ``w``, ``w * conf`` and ``w * correct`` give
  the sum over any range of sorted positions (a bin boundary can fall inside the copies of one
  sample: the partial copies are counted).  This is exactly the metric of the resample written
  as ``np.repeat(arange(N), w)`` (stable sort: equal confidences keep sample order);
* smooth ECE: the grid values of the kernel smoothing are ``W @ R`` (sparse), smoothed by one
  fixed linear map.  The resamples keep the point estimate's bandwidth ``sigma*``: the
  fixed-point search (11 smoothings per resample, each with its own kernel) would cost about
  50 times more, so the interval is that of ``smECE_sigma*`` at the estimated bandwidth.

The estimates (the ``estimate`` column) are not taken from these fast paths but from
:func:`calibrepro.metrics.compute_metrics` on the original sample, so they equal ``metrics.csv``
exactly.  Replicates are deterministic for a given seed and independent of the block size.
"""

from __future__ import annotations

import zlib
from typing import Iterable, Mapping, Sequence

import numpy as np
from scipy import sparse
from scipy.signal import fftconvolve

from calibrepro import metrics as M

#: count matrices are processed in blocks of about this many entries (bounds memory: 64 MB of
#: float64 per block; large blocks keep the dense products of classwise-ECE efficient)
_BLOCK_ENTRIES = 1 << 23


def bootstrap_seed(seed: int, *keys: object) -> np.random.SeedSequence:
    """Seed sequence of one cell's resamples: the configured seed and the cell's keys (stable hash)."""
    return np.random.SeedSequence([int(seed), *(zlib.crc32(str(key).encode("utf-8")) for key in keys)])


def resample_counts(n: int, resamples: int, seed) -> np.ndarray:
    """``(resamples, n)`` multinomial counts of ``n`` draws with replacement from ``n`` samples.

    Row r are the counts of the r-th resample (``np.bincount`` of n uniform draws), as uint16.
    """
    if resamples < 1:
        raise ValueError(f"the number of bootstrap resamples must be at least 1, got {resamples}")
    rng = np.random.default_rng(seed)
    counts = np.empty((resamples, n), dtype=np.uint16)
    rows = max(1, _BLOCK_ENTRIES // max(n, 1))
    for start in range(0, resamples, rows):
        b = min(rows, resamples - start)
        draws = rng.integers(0, n, size=(b, n))
        draws += (np.arange(b) * n)[:, None]
        counts[start : start + b] = np.bincount(draws.ravel(), minlength=b * n).reshape(b, n)
    return counts


def _sorted_prefix_sums(cum: np.ndarray, step: np.ndarray, counts_cum: np.ndarray, pos: np.ndarray):
    """Sum of a per-sample quantity over the first ``pos`` positions of each sorted resample.

    ``cum`` (b, N): cumulative sums of ``w * x`` in sorted order; ``step`` (N,): x in sorted order;
    ``counts_cum`` (b, N): cumulative counts; ``pos`` (b, P): positions (0..N).  The sample at
    position ``pos`` is the first whose cumulative count exceeds it; the positions before it hold
    all copies of the earlier samples and ``pos - (cumulative count before it)`` copies of it.
    """
    b, n = counts_cum.shape
    offsets = (np.arange(b) * (n + 1))[:, None]
    flat = (counts_cum + offsets).ravel()
    s = np.searchsorted(flat, (pos + offsets).ravel(), side="right").reshape(pos.shape)
    s -= (np.arange(b) * n)[:, None]
    s_clipped = np.minimum(s, n - 1)
    rows = np.arange(b)[:, None]
    before_count = np.where(s > 0, counts_cum[rows, np.maximum(s - 1, 0)], 0)
    before_sum = np.where(s > 0, cum[rows, np.maximum(s - 1, 0)], 0.0)
    partial = np.where(s < n, (pos - before_count) * step[s_clipped], 0.0)
    return before_sum + partial


class MetricResampler:
    """Bootstrap replicates of metrics of one probability matrix (one method) on count blocks.

    Construct once per method (precomputes per-sample terms, bins and sparse matrices), then call
    :meth:`replicates` for each block of counts.
    """

    def __init__(self, probs, labels, names: Sequence[str], bins: int = 15):
        unknown = [name for name in names if name not in M.METRICS]
        if unknown:
            raise ValueError(f"unknown metric(s) {unknown}; known: {sorted(M.METRICS)}")
        p, y = M._check(probs, labels)
        self.names = list(names)
        self.bins = bins
        self.n, self.k = p.shape
        conf, correct = M.top_label(p, y)
        self.conf, self.correct = conf, correct
        self.sample_terms = {}
        if "accuracy" in names:
            self.sample_terms["accuracy"] = correct
        if "brier" in names:
            self.sample_terms["brier"] = M.brier_terms(p, y)
        if "nll" in names:
            self.sample_terms["nll"] = M.nll_terms(p, y)
        if {"ece", "mce", "ece_l2"} & set(names):
            b = M.bin_index(conf, bins)
            onehot = np.zeros((self.n, 3 * bins))
            rows = np.arange(self.n)
            onehot[rows, b] = 1.0
            onehot[rows, bins + b] = conf
            onehot[rows, 2 * bins + b] = correct
            self.width_matrix = onehot
        if {"ece_equal_mass", "mce_equal_mass", "ece_l2_debiased"} & set(names):
            self.order = np.argsort(conf, kind="stable")
            self.sorted_conf = conf[self.order]
            self.sorted_correct = correct[self.order]
        if "classwise_ece" in names:
            self._prepare_classwise(p, y)
        if "smooth_ece" in names:
            self._prepare_smooth()

    # ------------------------------------------------------------------ preparation
    def _prepare_classwise(self, p, y):
        bins, n, k = self.bins, self.n, self.k
        big = p > M._edges(bins)[1]  # entries above the first bin edge
        rows, cols = np.nonzero(big)
        vals = p[rows, cols]
        self.class_big = sparse.csr_matrix(
            (vals, (rows, cols * bins + M.bin_index(vals, bins))), shape=(n, k * bins)
        )
        self.class_big_first = sparse.csr_matrix((vals, (rows, cols * bins)), shape=(n, k * bins))
        py = p[np.arange(n), y]
        self.class_pos = sparse.csr_matrix(
            (np.ones(n), (np.arange(n), y * bins + M.bin_index(py, bins))), shape=(n, k * bins)
        )
        self.probs = p

    def _prepare_smooth(self):
        conf, correct = self.conf, self.correct
        sigma = M.smooth_ece_bandwidth(conf, correct)
        size = M.smooth_grid_size(sigma)
        left, frac = M._grid_weights(conf, size)
        rows = np.concatenate([np.arange(self.n), np.arange(self.n)])
        cols = np.concatenate([left, left + 1])
        weights = np.concatenate([1 - frac, frac])
        self.smooth_ones = sparse.csr_matrix((weights, (rows, cols)), shape=(self.n, size))
        residual = np.concatenate([conf - correct, conf - correct])
        self.smooth_residual = sparse.csr_matrix((weights * residual, (rows, cols)), shape=(self.n, size))
        # the linear map grid -> smoothed values at the evaluation points (reflect, convolve, interpolate)
        reflected = np.concatenate([np.eye(size)[:, ::-1][:, :-1], np.eye(size), np.eye(size)[:, ::-1][:, 1:]], axis=1)
        kernel = M.reflected_gaussian_kernel(sigma, size)
        conv = fftconvolve(reflected, kernel[None, :], mode="valid", axes=1)[:, size // 2 : size // 2 + size]
        t = M.smooth_eval_points(sigma)
        i, w = M.interpolation_weights(t, size)
        interp = np.zeros((size, t.size))
        interp[i, np.arange(t.size)] += 1 - w
        interp[i + 1, np.arange(t.size)] += w
        self.smooth_map = conv @ interp
        self.smooth_bandwidth = sigma

    # ------------------------------------------------------------------ replicates
    def replicates(self, counts: np.ndarray) -> dict[str, np.ndarray]:
        """Metric values of the resamples whose counts are the rows of ``counts`` (b, N)."""
        w = np.asarray(counts, dtype=np.float64)
        n = float(self.n)
        out: dict[str, np.ndarray] = {}
        width = None
        sorted_cums = None
        for name in self.names:
            if name in self.sample_terms:
                out[name] = (w @ self.sample_terms[name]) / n
            elif name in ("ece", "mce", "ece_l2"):
                if width is None:
                    s = w @ self.width_matrix
                    width = (s[:, : self.bins], s[:, self.bins : 2 * self.bins], s[:, 2 * self.bins :])
                out[name] = _binned(name, *width, n)
            elif name in ("ece_equal_mass", "mce_equal_mass", "ece_l2_debiased"):
                if sorted_cums is None:
                    ws = w[:, self.order]
                    sorted_cums = (
                        np.cumsum(ws, axis=1),
                        np.cumsum(ws * self.sorted_conf, axis=1),
                        np.cumsum(ws * self.sorted_correct, axis=1),
                    )
                if name == "ece_l2_debiased":
                    out[name] = self._debiased(*sorted_cums)
                else:
                    out[name] = self._equal_mass(name, *sorted_cums)
            elif name == "classwise_ece":
                out[name] = self._classwise(w)
            else:  # smooth_ece
                out[name] = self._smooth(w)
        return out

    def _equal_mass(self, name, cw, cc, ca):
        n, bins = self.n, self.bins
        sizes = np.full(bins, n // bins)
        sizes[: n % bins] += 1
        sizes = sizes[sizes > 0]
        bounds = np.broadcast_to(np.concatenate([[0], np.cumsum(sizes)]), (cw.shape[0], sizes.size + 1))
        conf_at = _sorted_prefix_sums(cc, self.sorted_conf, cw, bounds)
        acc_at = _sorted_prefix_sums(ca, self.sorted_correct, cw, bounds)
        gap = np.abs(np.diff(acc_at, axis=1) - np.diff(conf_at, axis=1)) / sizes
        if name == "mce_equal_mass":
            return gap.max(axis=1)
        return gap @ (sizes / n)

    def _debiased(self, cw, cc, ca):
        n, b = self.n, cw.shape[0]
        parts = min(self.bins, n)
        ends = np.cumsum(np.full(parts, n // parts) + (np.arange(parts) < n % parts))[:-1]
        # value at sorted position j of each resample: the sample whose copies cover j
        offsets = (np.arange(b) * (n + 1))[:, None]
        flat = (cw + offsets).ravel()

        def value_at(positions):
            pos = np.broadcast_to(positions, (b, positions.size))
            s = np.searchsorted(flat, (pos + offsets).ravel(), side="right").reshape(pos.shape)
            return self.sorted_conf[s - (np.arange(b) * n)[:, None]]

        edges = (value_at(ends - 1) + value_at(ends)) / 2.0
        edges = np.concatenate([edges, np.ones((b, 1))], axis=1)
        # samples with conf <= edge (sorted) form the bins; bin sums from cumulative sums
        upto = np.searchsorted(self.sorted_conf, edges.ravel(), side="right").reshape(edges.shape)
        rows = np.arange(b)[:, None]

        def cum_at(cum):
            return np.where(upto > 0, cum[rows, np.maximum(upto - 1, 0)], 0.0)

        count = np.diff(cum_at(cw), axis=1, prepend=0.0)
        conf_sum = np.diff(cum_at(cc), axis=1, prepend=0.0)
        acc_sum = np.diff(cum_at(ca), axis=1, prepend=0.0)
        return M._debiased_from(count, conf_sum, acc_sum, n)

    def _classwise(self, w):
        bins, k = self.bins, self.k
        positives = np.asarray(self.class_pos.T @ w.T).T
        big = np.asarray(self.class_big.T @ w.T).T
        first = w @ self.probs  # (b, K): sums of every entry; minus the big ones gives the first bin
        big_total = np.asarray(self.class_big_first.T @ w.T).T.reshape(-1, k, bins)[:, :, 0]
        sums = big.reshape(-1, k, bins)
        sums[:, :, 0] += first - big_total
        return np.abs(positives.reshape(-1, k, bins) - sums).sum(axis=(1, 2)) / self.n / k

    def _smooth(self, w):
        ones = np.asarray(self.smooth_ones.T @ w.T).T @ self.smooth_map
        residual = np.asarray(self.smooth_residual.T @ w.T).T @ self.smooth_map
        density = ones + M.SMOOTH_ECE_DENSITY_FLOOR
        return np.sum(np.abs(residual / density) * density, axis=1) / np.sum(density, axis=1)


def _binned(name, count, conf_sum, acc_sum, n):
    """ECE (eq. 6), MCE (eq. 7) or ECE-l2 of each resample from its equal-width bin sums."""
    diff = np.abs(acc_sum - conf_sum)
    if name == "ece":
        return diff.sum(axis=1) / n
    safe = np.where(count > 0, count, 1.0)
    gap = np.where(count > 0, diff / safe, 0.0)
    if name == "mce":
        return np.where(count > 0, gap, -np.inf).max(axis=1)
    return np.sqrt(np.sum(count / n * gap * gap, axis=1))


def bootstrap_replicates(
    methods: Iterable[tuple[str, np.ndarray]],
    labels: np.ndarray,
    names: Sequence[str],
    counts: np.ndarray,
    *,
    bins: int = 15,
) -> dict[str, dict[str, np.ndarray]]:
    """``{method: {metric: (B,) replicates}}`` on the resamples ``counts`` (shared: paired).

    ``methods`` yields ``(name, probs)`` one at a time, so only one probability matrix needs to be
    in memory.
    """
    n = counts.shape[1]
    rows = max(1, _BLOCK_ENTRIES // max(n, 1))
    out: dict[str, dict[str, np.ndarray]] = {}
    for method, probs in methods:
        resampler = MetricResampler(probs, labels, names, bins)
        blocks = [resampler.replicates(counts[start : start + rows]) for start in range(0, counts.shape[0], rows)]
        out[method] = {name: np.concatenate([block[name] for block in blocks]) for name in names}
    return out


def percentile_interval(replicates: np.ndarray, level: float) -> tuple[float, float]:
    """Bootstrap percentile interval (Efron & Tibshirani 1993, "An Introduction to the Bootstrap", ch. 13).

    The ``(1 - level)/2`` and ``(1 + level)/2`` quantiles of the replicates (numpy's default
    linear interpolation).  Chosen over the normal or studentised intervals because it needs no
    variance formula for MCE or smooth ECE, respects the range of bounded metrics (ECE >= 0,
    accuracy <= 1) and is invariant under monotone transformations; BCa would correct its bias
    but needs a jackknife of every metric (N more evaluations per cell).
    """
    if not 0 < level < 1:
        raise ValueError(f"the interval level must lie in (0, 1), got {level}")
    low, high = np.quantile(replicates, [(1 - level) / 2, (1 + level) / 2])
    return float(low), float(high)


def paired_differences(
    replicates: Mapping[str, np.ndarray], estimates: Mapping[str, float], best: str, level: float
) -> dict[str, tuple[float, float, float]]:
    """Each method minus ``best`` on the same resamples: ``{method: (difference, low, high)}``.

    The difference of ``best`` with itself is exactly 0 (the same array subtracted).
    """
    out = {}
    for method, values in replicates.items():
        low, high = percentile_interval(values - replicates[best], level)
        out[method] = (estimates[method] - estimates[best], low, high)
    return out
