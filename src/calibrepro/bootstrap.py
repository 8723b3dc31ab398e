"""Bootstrap replicates of every metric over the test half, computed from multinomial counts.

A bootstrap resample of the N test samples is a vector of counts ``w`` (how often each sample is
drawn; ``sum w = N``), and the resample, as a multiset, is ``np.repeat(arange(N), w)``.  Every
metric of :data:`calibrepro.metrics.METRICS` is a function of weighted sums over samples, so the
B resamples of one block are one ``(b, N)`` count matrix ``W`` and each metric needs only a few
matrix products with quantities computed once per method:

* accuracy, Brier, NLL: ``W @ terms / N`` with the per-sample contributions;
* ECE, MCE, ECE-l2 (equal-width bins): ``W @ [onehot, onehot * conf, onehot * correct]`` gives the
  per-bin counts, confidence sums and correct counts of every resample (one product together
  with the terms of accuracy, Brier and NLL);
* classwise-ECE: per-(class, bin) sums ``W @ S`` with a sparse matrix of the entries above the
  first bin edge, plus ``W @ P`` for the first bin (most entries), and the positives ``W @ Y``.
  The dense ``W @ P`` (b*N*K multiply-adds) is this metric's whole cost at K=1000 and stays in
  float64: the first bin's per-class sums lie so close to its positives that float32 sums
  (tried: about 20 % of the (resample, class) signs of ``positives - sums`` uncertain under
  float32's error bound) would change ``|positives - sums|`` well beyond float64 rounding;
* equal-mass ECE/MCE and debiased ECE-l2: the bins follow the resample's own order statistics.
  The samples are sorted once by confidence; in that order a resample's sorted sequence repeats
  sample s ``w_s`` times, so the cumulative sums of ``w`` and ``w * correct`` (int32, exact) locate
  any sorted position and count up to it, and segment sums of ``w * conf`` between the few bin
  boundaries (``np.add.reduceat``) give the confidence sums (a bin boundary can fall inside the
  copies of one sample: the partial copies are counted).  This is exactly the metric of the
  resample written as ``np.repeat(arange(N), w)`` (stable sort: equal confidences keep sample order);
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
from threadpoolctl import threadpool_limits

from calibrepro import metrics as M

#: count matrices are processed in blocks of about this many entries (bounds memory: 64 MB of
#: float64 per block; large blocks keep the dense products of classwise-ECE efficient)
_BLOCK_ENTRIES = 1 << 23
#: largest dense smoothing map of smooth ECE (entries); finer grids smooth each block by FFT
_SMOOTH_MAP_ENTRIES = 1 << 22


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


def _reflected_convolution_columns(kernel: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """Coefficients ``C[j, c]`` of grid value j in output ``columns[c]`` of the reflected convolution.

    The output of :func:`calibrepro.metrics._smooth` before interpolation is
    ``np.convolve(reflect(v), kernel, "valid")[G//2 : G//2 + G]`` with ``reflect(v)`` the grid
    mirrored at both ends; value ``v_j`` sits at positions ``G-1-j`` (j >= 1), ``G-1+j`` and
    ``3G-3-j`` (j <= G-2) of the mirrored array, and position e enters output n with weight
    ``kernel[G-1-e+n]``.  Same products as ``np.convolve``, summed in another order.
    """
    size = kernel.size
    j = np.arange(size)[:, None]
    n = (np.asarray(columns) + size // 2)[None, :]
    coefficients = np.zeros((size, n.shape[1]))
    for position, present in ((size - 1 - j, j >= 1), (size - 1 + j, True), (3 * size - 3 - j, j <= size - 2)):
        index = size - 1 - position + n
        valid = present & (index >= 0) & (index < size)
        coefficients += np.where(valid, kernel[np.clip(index, 0, size - 1)], 0.0)
    return coefficients


def _row_prefix_sums(values: np.ndarray, cuts: np.ndarray) -> np.ndarray:
    """``out[r, p] = values[r, :cuts[r, p]].sum()`` for cuts non-decreasing along each row.

    ``values`` is a (b, N) array stored flat with one trailing zero (length ``b*N + 1``) so that a
    cut at N is a valid ``np.add.reduceat`` index.  One pass over the data: the sums of the
    segments between consecutive cuts, then their running sums (no (b, N) cumulative array).
    """
    b, p = cuts.shape
    n = (values.size - 1) // b
    starts = np.concatenate([np.zeros((b, 1), dtype=np.intp), cuts], axis=1) + (np.arange(b) * n)[:, None]
    segments = np.add.reduceat(values, starts.ravel()).reshape(b, p + 1)[:, :p]
    segments[starts[:, 1:] == starts[:, :-1]] = 0  # reduceat returns values[i] for an empty segment
    return np.cumsum(segments, axis=1)


class _SortedResamples:
    """A block of resamples in confidence order: where its positions fall, and sums up to any sample.

    Row r lists, in the samples' sorted order, how many copies of each the r-th resample holds
    (uint16); position j (0-based) of the sorted resample is a copy of the first sample whose
    cumulative count exceeds j.  Cumulative counts and correct counts are int32 (exact); the
    confidence sums up to a sample are segment sums between the few cuts asked for.
    """

    def __init__(self, counts: np.ndarray, order: np.ndarray, sorted_conf: np.ndarray, sorted_correct: np.ndarray):
        ws = np.take(counts, order, axis=1)  # (b, N) counts in sorted order
        self.b, self.n = ws.shape
        self.cw = np.cumsum(ws, axis=1, dtype=np.int32)
        self._conf = np.zeros(ws.size + 1)
        np.multiply(ws, sorted_conf, out=self._conf[:-1].reshape(ws.shape))
        self.ca = np.cumsum(ws * sorted_correct.astype(np.uint16), axis=1, dtype=np.int32)  # 0/1 correct
        self.sorted_conf = sorted_conf
        self.sorted_correct = sorted_correct

    def sample_at(self, positions: np.ndarray) -> np.ndarray:
        """(b, P) sorted-sample index holding position ``positions`` (b, P) of each resample (N past the end)."""
        return np.stack([np.searchsorted(cw, at, side="right") for cw, at in zip(self.cw, positions)])

    def upto(self, cut: np.ndarray):
        """Sums over the samples whose sorted index is below ``cut`` (b, P), non-decreasing along rows:
        (count, conf sum, correct sum)."""
        last, some = np.maximum(cut - 1, 0), cut > 0
        count = np.where(some, np.take_along_axis(self.cw, last, axis=1), 0)
        correct = np.where(some, np.take_along_axis(self.ca, last, axis=1), 0)
        return count, _row_prefix_sums(self._conf, cut), correct

    def prefix(self, positions: np.ndarray):
        """Sums over the first ``positions`` (b, P) sorted positions, non-decreasing along rows:
        (conf sum, correct sum), the copies of a sample cut by a boundary counted partly."""
        s = self.sample_at(positions)
        before, conf, correct = self.upto(s)
        copies = np.where(s < self.n, positions - before, 0)
        inside = np.minimum(s, self.n - 1)
        return conf + copies * self.sorted_conf[inside], correct + copies * self.sorted_correct[inside]


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
        # accuracy, Brier, NLL and the equal-width bin sums are linear in the counts: one matrix
        # (N, columns) whose product with a block of counts gives all of them
        columns, self.linear = [], {}
        for name, terms in (("accuracy", lambda: correct), ("brier", lambda: M.brier_terms(p, y)),
                            ("nll", lambda: M.nll_terms(p, y))):
            if name in names:
                self.linear[name] = slice(len(columns), len(columns) + 1)
                columns.append(terms()[:, None])
        if {"ece", "mce", "ece_l2"} & set(names):
            onehot = np.zeros((self.n, 3 * bins))
            b, rows = M.bin_index(conf, bins), np.arange(self.n)
            onehot[rows, b] = 1.0
            onehot[rows, bins + b] = conf
            onehot[rows, 2 * bins + b] = correct
            self.linear["width"] = slice(len(columns), len(columns) + 3 * bins)
            columns.append(onehot)
        self.linear_matrix = np.hstack(columns) if columns else None
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
        where = np.flatnonzero(big)  # (much faster than a 2-D nonzero)
        rows, cols = np.divmod(where, k)
        vals = p.reshape(-1)[where]
        self.class_big = sparse.csr_matrix((vals, (rows, cols * bins + M.bin_index(vals, bins))), shape=(n, k * bins))
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
        self.smooth_kernel = M.reflected_gaussian_kernel(sigma, size)
        self.smooth_interpolation = M.interpolation_weights(M.smooth_eval_points(sigma), size)
        i, frac = self.smooth_interpolation
        self.smooth_map = None
        if size * i.size <= _SMOOTH_MAP_ENTRIES:
            # grid -> smoothed values at the evaluation points as one (G, points) matrix; only the
            # grid columns the interpolation reads are computed
            columns, where = np.unique(np.concatenate([i, i + 1]), return_inverse=True)
            conv = _reflected_convolution_columns(self.smooth_kernel, columns)
            self.smooth_map = conv[:, where[: i.size]] * (1 - frac) + conv[:, where[i.size :]] * frac
        self.smooth_bandwidth = sigma

    # ------------------------------------------------------------------ replicates
    def replicates(self, counts: np.ndarray) -> dict[str, np.ndarray]:
        """Metric values of the resamples whose counts are the rows of ``counts`` (b, N)."""
        counts = np.asarray(counts)
        names = set(self.names)
        w = counts.astype(np.float64)
        # (N, b): the right layout for the sparse products of classwise and smooth ECE
        w_t = np.ascontiguousarray(w.T) if names & {"classwise_ece", "smooth_ece"} else None
        n = float(self.n)
        linear = None if self.linear_matrix is None else w @ self.linear_matrix
        out: dict[str, np.ndarray] = {}
        sorted_block = equal_mass = None
        for name in self.names:
            if name in self.linear:
                out[name] = linear[:, self.linear[name]][:, 0] / n
            elif name in ("ece", "mce", "ece_l2"):
                s = linear[:, self.linear["width"]]
                out[name] = _binned(name, s[:, : self.bins], s[:, self.bins : 2 * self.bins], s[:, 2 * self.bins :], n)
            elif name in ("ece_equal_mass", "mce_equal_mass", "ece_l2_debiased"):
                if sorted_block is None:
                    sorted_block = _SortedResamples(counts, self.order, self.sorted_conf, self.sorted_correct)
                if name == "ece_l2_debiased":
                    out[name] = self._debiased(sorted_block)
                else:
                    if equal_mass is None:
                        equal_mass = self._equal_mass_gaps(sorted_block)
                    gap, sizes = equal_mass
                    out[name] = gap.max(axis=1) if name == "mce_equal_mass" else gap @ (sizes / n)
            else:
                out[name] = self._classwise(w, w_t) if name == "classwise_ece" else self._smooth(w_t)
        return out

    def _equal_mass_gaps(self, block: _SortedResamples):
        """``|A_m - C_m|`` of each resample's equal-mass bins (b, bins), and the bin sizes."""
        n, bins = self.n, self.bins
        sizes = np.full(bins, n // bins)
        sizes[: n % bins] += 1
        sizes = sizes[sizes > 0]
        bounds = np.broadcast_to(np.concatenate([[0], np.cumsum(sizes)]), (block.b, sizes.size + 1))
        conf_at, acc_at = block.prefix(bounds)
        return np.abs(np.diff(acc_at, axis=1) - np.diff(conf_at, axis=1)) / sizes, sizes

    def _debiased(self, block: _SortedResamples):
        n, b = self.n, block.b
        parts = min(self.bins, n)
        ends = np.cumsum(np.full(parts, n // parts) + (np.arange(parts) < n % parts))[:-1]
        # the values at the two sides of every chunk boundary of the sorted resample
        around = block.sample_at(np.broadcast_to(np.concatenate([ends - 1, ends]), (b, 2 * ends.size)))
        values = self.sorted_conf[around]
        edges = np.concatenate([(values[:, : ends.size] + values[:, ends.size :]) / 2.0, np.ones((b, 1))], axis=1)
        # a bin holds the samples with conf <= its edge and above the previous edge
        cut = np.searchsorted(self.sorted_conf, edges.ravel(), side="right").reshape(edges.shape)
        count, conf_sum, acc_sum = (np.diff(x, axis=1, prepend=0.0) for x in block.upto(cut))
        return M._debiased_from(count, conf_sum, acc_sum, n)

    def _classwise(self, w, w_t):
        bins, k = self.bins, self.k
        positives = np.asarray(self.class_pos.T @ w_t).T.reshape(-1, k, bins)
        sums = np.asarray(self.class_big.T @ w_t).T.reshape(-1, k, bins)  # bins 2..M: the entries above 1/M
        # first bin: the sums of all entries (the one dense product, the cost of this metric; float64,
        # see the module docstring) minus those above 1/M
        sums[:, :, 0] = w @ self.probs - sums.sum(axis=2)
        return np.abs(positives - sums).sum(axis=(1, 2)) / self.n / k

    def _smooth(self, w_t):
        grid_ones = np.asarray(self.smooth_ones.T @ w_t).T  # (b, G) grid values of every resample
        grid_residual = np.asarray(self.smooth_residual.T @ w_t).T
        if self.smooth_map is not None:
            density = grid_ones @ self.smooth_map + M.SMOOTH_ECE_DENSITY_FLOOR
            residual = grid_residual @ self.smooth_map
        else:  # a fine grid (small bandwidth): the reflected convolution of every row by FFT
            size = self.smooth_kernel.size
            grid = np.concatenate([grid_ones, grid_residual])
            reflected = np.concatenate([grid[:, ::-1][:, :-1], grid, grid[:, ::-1][:, 1:]], axis=1)
            smoothed = fftconvolve(reflected, self.smooth_kernel[None, :], mode="valid", axes=1)
            smoothed = smoothed[:, size // 2 : size // 2 + size]
            i, frac = self.smooth_interpolation
            at_t = smoothed[:, i] * (1 - frac) + smoothed[:, i + 1] * frac
            density = at_t[: grid_ones.shape[0]] + M.SMOOTH_ECE_DENSITY_FLOOR
            residual = at_t[grid_ones.shape[0] :]
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
        # one BLAS thread: OpenBLAS splits the sums of some products over its threads, so their
        # rounding (and the last digits of intervals.csv) would depend on the thread count; the
        # pipeline runs models in parallel instead (one bootstrap job per model, snakemake --cores)
        with threadpool_limits(1, user_api="blas"):
            resampler = MetricResampler(probs, labels, names, bins)
            blocks = [resampler.replicates(counts[s : s + rows]) for s in range(0, counts.shape[0], rows)]
        out[method] = {name: np.concatenate([block[name] for block in blocks]) for name in names}
    return out


def percentile_interval(replicates: np.ndarray, level: float) -> tuple[float, float]:
    """Bootstrap percentile interval (Efron & Tibshirani 1993, "An Introduction to the Bootstrap", ch. 13).

    The ``(1 - level)/2`` and ``(1 + level)/2`` quantiles of the replicates (numpy's default
    linear interpolation).  Chosen over the normal or studentised intervals because it needs no
    variance formula for MCE or smooth ECE, respects the range of bounded metrics (ECE >= 0,
    accuracy <= 1) and is invariant under monotone transformations; BCa would correct its bias
    but needs a jackknife of every metric (N more evaluations per cell).  Caveat: binned
    calibration errors are biased upwards, a resample (with its duplicated samples) more so, and
    the percentile interval inherits that shift; for a small ECE it can lie above the estimate.
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
