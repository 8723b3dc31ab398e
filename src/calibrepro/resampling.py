"""Resampled forms of the metrics: every metric's value on a block of bootstrap resamples at once.

A bootstrap resample of the N test samples is a vector of counts ``w`` (how often each sample is
drawn; ``sum w = N``), and the resample, as a multiset, is ``np.repeat(arange(N), w)``.  Every
metric is a function of weighted sums over samples, so a block of b resamples is one ``(b, N)``
count matrix ``W`` and each metric needs only a few matrix products with quantities computed once
per method.  How a metric is resampled is part of its spec (:class:`calibrepro.metrics.Metric`,
field ``resampled``):

* :class:`~calibrepro.metrics.MeanOfTerms` (accuracy, Brier, NLL, and any metric that is a mean of
  per-sample terms): ``finish(W @ terms / N)``; the terms of all such metrics and the bin sums of
  the equal-width metrics are the columns of one matrix, so a block needs one product;
* a custom form, named in :data:`FORMS`:

  - ``equal_width_*`` (ECE, MCE, ECE-l2): ``W @ [onehot, onehot * conf, onehot * correct]`` gives
    the per-bin counts, confidence sums and correct counts of every resample;
  - ``classwise``: per-(class, bin) sums ``W @ S`` with a sparse matrix of the entries above the
    first bin edge, plus ``W @ P`` for the first bin (most entries), and the positives ``W @ Y``.
    The dense ``W @ P`` (b*N*K multiply-adds) is this metric's whole cost at K=1000 and stays in
    float64: the first bin's per-class sums lie so close to its positives that float32 sums
    (tried: about 20 % of the (resample, class) signs of ``positives - sums`` uncertain under
    float32's error bound) would change ``|positives - sums|`` well beyond float64 rounding;
  - ``equal_mass_*`` and ``debiased``: the bins follow the resample's own order statistics.  The
    samples are sorted once by confidence; in that order a resample's sorted sequence repeats
    sample s ``w_s`` times, so the cumulative sums of ``w`` and ``w * correct`` (int32, exact)
    locate any sorted position and count up to it, and segment sums of ``w * conf`` between the
    few bin boundaries (``np.add.reduceat``) give the confidence sums (a bin boundary can fall
    inside the copies of one sample: the partial copies are counted).  This is exactly the metric
    of the resample written as ``np.repeat(arange(N), w)`` (stable sort: equal confidences keep
    sample order);
  - ``smooth``: the grid values of the kernel smoothing are ``W @ R`` (sparse), smoothed by one
    fixed linear map.  The resamples keep the point estimate's bandwidth ``sigma*``: the
    fixed-point search (11 smoothings per resample, each with its own kernel) would cost about
    50 times more, so the interval is that of ``smECE_sigma*`` at the estimated bandwidth.

A form is a function ``prepare(resampling, metric)`` that does the per-method work once and
returns ``replicate(block) -> (b,) values``; another task adds its own with :func:`register_form`.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
from scipy import sparse
from scipy.signal import fftconvolve

from calibrepro import metrics as M
from calibrepro.metrics import smooth
from calibrepro.metrics.binned import debiased_from
from calibrepro.metrics.bins import bin_edges, bin_index, check_inputs, top_label

#: largest dense smoothing map of smooth ECE (entries); finer grids smooth each block by FFT
_SMOOTH_MAP_ENTRIES = 1 << 22


class Resampling:
    """The resampled forms of metrics ``names`` on one probability matrix (one method).

    Construct once per method (per-sample terms, bins and sparse matrices are computed here), then
    call :meth:`replicates` for each block of counts.
    """

    def __init__(self, probs, labels, names: Sequence[str], bins: int = 15):
        unknown = [name for name in names if M.spec(name) is None or M.spec(name).resampled is None]
        if unknown:
            raise ValueError(f"unknown metric(s) {unknown}; known: {sorted(M.METRICS)}")
        self.p, self.y = check_inputs(probs, labels)
        self.names = list(names)
        self.bins = bins
        self.n, self.k = self.p.shape
        self.conf, self.correct = top_label(self.p, self.y)
        self._columns: list[np.ndarray] = []
        self._slices: dict = {}
        self._shared: dict = {}
        # prepared in registry order, so that the shared columns are laid out the same way (and
        # their product summed the same way) whatever the order of ``names``
        order = [name for name in M.METRICS if name in names] + [name for name in names if name not in M.METRICS]
        self._replicate = {name: _prepare(M.spec(name), self) for name in order}
        self.linear_matrix = np.hstack(self._columns) if self._columns else None

    def columns(self, key, make: Callable[[], np.ndarray]) -> slice:
        """Where the per-sample columns ``make()`` (N, c), registered once under ``key``, lie in a
        block's product ``W @ linear_matrix``."""
        if key not in self._slices:
            values = make()
            start = sum(c.shape[1] for c in self._columns)
            self._columns.append(values)
            self._slices[key] = slice(start, start + values.shape[1])
        return self._slices[key]

    def shared(self, key, make: Callable[[], object]):
        """A per-method quantity that several forms use, computed once."""
        if key not in self._shared:
            self._shared[key] = make()
        return self._shared[key]

    def replicates(self, counts: np.ndarray) -> dict[str, np.ndarray]:
        """Metric values of the resamples whose counts are the rows of ``counts`` (b, N)."""
        block = Block(self, counts)
        return {name: self._replicate[name](block) for name in self.names}


class Block:
    """One block of count rows and what the forms share about it (the linear product, sorted sums)."""

    def __init__(self, resampling: Resampling, counts: np.ndarray):
        self.counts = np.asarray(counts)
        self.w = self.counts.astype(np.float64)
        matrix = resampling.linear_matrix
        self.linear = None if matrix is None else self.w @ matrix
        self._w_t = None
        self._shared: dict = {}

    @property
    def w_t(self) -> np.ndarray:
        """(N, b) counts: the right layout for the sparse products of classwise and smooth ECE."""
        if self._w_t is None:
            self._w_t = np.ascontiguousarray(self.w.T)
        return self._w_t

    def shared(self, key, make: Callable[[], object]):
        if key not in self._shared:
            self._shared[key] = make()
        return self._shared[key]


def _prepare(metric: M.Metric, resampling: Resampling):
    form = metric.resampled
    if isinstance(form, M.MeanOfTerms):
        return _mean_of_terms(form, metric, resampling)
    return FORMS[form](resampling, metric)


def _mean_of_terms(form: M.MeanOfTerms, metric: M.Metric, r: Resampling):
    where = r.columns(("terms", metric.name), lambda: np.asarray(form.terms(r.p, r.y), dtype=np.float64)[:, None])
    n = float(r.n)

    def replicate(block: Block) -> np.ndarray:
        mean = block.linear[:, where][:, 0] / n
        return mean if form.finish is None else form.finish(mean)

    return replicate


# ---------------------------------------------------------------- equal-width bins
def _equal_width_columns(r: Resampling) -> np.ndarray:
    bins = r.bins
    onehot = np.zeros((r.n, 3 * bins))
    b, rows = bin_index(r.conf, bins), np.arange(r.n)
    onehot[rows, b] = 1.0
    onehot[rows, bins + b] = r.conf
    onehot[rows, 2 * bins + b] = r.correct
    return onehot


def _equal_width(kind: str):
    """ECE (eq. 6), MCE (eq. 7) or ECE-l2 of each resample from its equal-width bin sums."""

    def prepare(r: Resampling, metric: M.Metric):
        where, bins, n = r.columns("equal_width", lambda: _equal_width_columns(r)), r.bins, float(r.n)

        def replicate(block: Block) -> np.ndarray:
            s = block.linear[:, where]
            count, conf_sum, acc_sum = s[:, :bins], s[:, bins : 2 * bins], s[:, 2 * bins :]
            diff = np.abs(acc_sum - conf_sum)
            if kind == "ece":
                return diff.sum(axis=1) / n
            safe = np.where(count > 0, count, 1.0)
            gap = np.where(count > 0, diff / safe, 0.0)
            if kind == "mce":
                return np.where(count > 0, gap, -np.inf).max(axis=1)
            return np.sqrt(np.sum(count / n * gap * gap, axis=1))

        return replicate

    return prepare


# ---------------------------------------------------------------- sorted resamples (equal mass, debiased)
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


def _sorted_block(r: Resampling, block: Block) -> _SortedResamples:
    order, conf, correct = r.shared("sorted", lambda: _sort_by_confidence(r))
    return block.shared("sorted", lambda: _SortedResamples(block.counts, order, conf, correct))


def _sort_by_confidence(r: Resampling):
    """The samples' order by confidence (stable), and their confidences and correctness in it."""
    order = np.argsort(r.conf, kind="stable")
    return order, r.conf[order], r.correct[order]


def _equal_mass_gaps(r: Resampling, block: Block):
    """``|A_m - C_m|`` of each resample's equal-mass bins (b, bins), and the bin sizes."""
    n, bins = r.n, r.bins
    sizes = np.full(bins, n // bins)
    sizes[: n % bins] += 1
    sizes = sizes[sizes > 0]
    sorted_block = _sorted_block(r, block)
    bounds = np.broadcast_to(np.concatenate([[0], np.cumsum(sizes)]), (sorted_block.b, sizes.size + 1))
    conf_at, acc_at = sorted_block.prefix(bounds)
    return np.abs(np.diff(acc_at, axis=1) - np.diff(conf_at, axis=1)) / sizes, sizes


def _equal_mass(kind: str):
    """Equal-mass ECE or MCE (Nixon et al. 2019) of each resample, bins of its own order statistics."""

    def prepare(r: Resampling, metric: M.Metric):
        def replicate(block: Block) -> np.ndarray:
            gap, sizes = block.shared("equal_mass", lambda: _equal_mass_gaps(r, block))
            return gap.max(axis=1) if kind == "mce" else gap @ (sizes / r.n)

        return replicate

    return prepare


def _debiased(r: Resampling, metric: M.Metric):
    """Debiased ECE-l2 (Kumar et al. 2019) of each resample, with the edges of its own sorted values."""
    n, parts = r.n, min(r.bins, r.n)
    ends = np.cumsum(np.full(parts, n // parts) + (np.arange(parts) < n % parts))[:-1]

    def replicate(block: Block) -> np.ndarray:
        sorted_block = _sorted_block(r, block)
        b = sorted_block.b
        # the values at the two sides of every chunk boundary of the sorted resample
        around = sorted_block.sample_at(np.broadcast_to(np.concatenate([ends - 1, ends]), (b, 2 * ends.size)))
        values = sorted_block.sorted_conf[around]
        edges = np.concatenate([(values[:, : ends.size] + values[:, ends.size :]) / 2.0, np.ones((b, 1))], axis=1)
        # a bin holds the samples with conf <= its edge and above the previous edge
        cut = np.searchsorted(sorted_block.sorted_conf, edges.ravel(), side="right").reshape(edges.shape)
        count, conf_sum, acc_sum = (np.diff(x, axis=1, prepend=0.0) for x in sorted_block.upto(cut))
        return debiased_from(count, conf_sum, acc_sum, n)

    return replicate


# ---------------------------------------------------------------- classwise-ECE
def _classwise(r: Resampling, metric: M.Metric):
    """Classwise-ECE (Kull et al. 2019) of each resample from per-(class, bin) sums."""
    bins, n, k, p, y = r.bins, r.n, r.k, r.p, r.y
    big = p > bin_edges(bins)[1]  # entries above the first bin edge
    where = np.flatnonzero(big)  # (much faster than a 2-D nonzero)
    rows, cols = np.divmod(where, k)
    vals = p.reshape(-1)[where]
    class_big = sparse.csr_matrix((vals, (rows, cols * bins + bin_index(vals, bins))), shape=(n, k * bins))
    py = p[np.arange(n), y]
    class_pos = sparse.csr_matrix((np.ones(n), (np.arange(n), y * bins + bin_index(py, bins))), shape=(n, k * bins))

    def replicate(block: Block) -> np.ndarray:
        positives = np.asarray(class_pos.T @ block.w_t).T.reshape(-1, k, bins)
        sums = np.asarray(class_big.T @ block.w_t).T.reshape(-1, k, bins)  # bins 2..M: the entries above 1/M
        # first bin: the sums of all entries (the one dense product, the cost of this metric; float64,
        # see the module docstring) minus those above 1/M
        sums[:, :, 0] = block.w @ p - sums.sum(axis=2)
        return np.abs(positives - sums).sum(axis=(1, 2)) / n / k

    return replicate


# ---------------------------------------------------------------- smooth ECE
def _reflected_convolution_columns(kernel: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """Coefficients ``C[j, c]`` of grid value j in output ``columns[c]`` of the reflected convolution.

    The output of the kernel smoothing of :func:`calibrepro.metrics.smooth.smooth_ece_at` before
    interpolation is ``np.convolve(reflect(v), kernel, "valid")[G//2 : G//2 + G]`` with
    ``reflect(v)`` the grid mirrored at both ends; value ``v_j`` sits at positions ``G-1-j``
    (j >= 1), ``G-1+j`` and ``3G-3-j`` (j <= G-2) of the mirrored array, and position e enters
    output n with weight ``kernel[G-1-e+n]``.  Same products as ``np.convolve``, summed in another order.
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


class SmoothForm:
    """Smooth ECE (Blasiok & Nakkiran 2023) of each resample at the estimate's bandwidth ``sigma*``."""

    def __init__(self, r: Resampling, metric: M.Metric):
        conf, correct, n = r.conf, r.correct, r.n
        sigma = smooth.smooth_ece_bandwidth(conf, correct)
        size = smooth.smooth_grid_size(sigma)
        left, frac = smooth.grid_weights(conf, size)
        rows = np.concatenate([np.arange(n), np.arange(n)])
        cols = np.concatenate([left, left + 1])
        weights = np.concatenate([1 - frac, frac])
        self.ones = sparse.csr_matrix((weights, (rows, cols)), shape=(n, size))
        residual = np.concatenate([conf - correct, conf - correct])
        self.residual = sparse.csr_matrix((weights * residual, (rows, cols)), shape=(n, size))
        self.kernel = smooth.reflected_gaussian_kernel(sigma, size)
        self.interpolation = smooth.interpolation_weights(smooth.smooth_eval_points(sigma), size)
        i, frac = self.interpolation
        self.map = None
        if size * i.size <= _SMOOTH_MAP_ENTRIES:
            # grid -> smoothed values at the evaluation points as one (G, points) matrix; only the
            # grid columns the interpolation reads are computed
            columns, where = np.unique(np.concatenate([i, i + 1]), return_inverse=True)
            conv = _reflected_convolution_columns(self.kernel, columns)
            self.map = conv[:, where[: i.size]] * (1 - frac) + conv[:, where[i.size :]] * frac
        self.bandwidth = sigma

    def __call__(self, block: Block) -> np.ndarray:
        grid_ones = np.asarray(self.ones.T @ block.w_t).T  # (b, G) grid values of every resample
        grid_residual = np.asarray(self.residual.T @ block.w_t).T
        if self.map is not None:
            density = grid_ones @ self.map + smooth.SMOOTH_ECE_DENSITY_FLOOR
            residual = grid_residual @ self.map
        else:  # a fine grid (small bandwidth): the reflected convolution of every row by FFT
            size = self.kernel.size
            grid = np.concatenate([grid_ones, grid_residual])
            reflected = np.concatenate([grid[:, ::-1][:, :-1], grid, grid[:, ::-1][:, 1:]], axis=1)
            smoothed = fftconvolve(reflected, self.kernel[None, :], mode="valid", axes=1)
            smoothed = smoothed[:, size // 2 : size // 2 + size]
            i, frac = self.interpolation
            at_t = smoothed[:, i] * (1 - frac) + smoothed[:, i + 1] * frac
            density = at_t[: grid_ones.shape[0]] + smooth.SMOOTH_ECE_DENSITY_FLOOR
            residual = at_t[grid_ones.shape[0] :]
        return np.sum(np.abs(residual / density) * density, axis=1) / np.sum(density, axis=1)


#: custom resampled forms by name (:attr:`calibrepro.metrics.Metric.resampled`)
FORMS: dict[str, Callable] = {
    "equal_width_ece": _equal_width("ece"),
    "equal_width_mce": _equal_width("mce"),
    "equal_width_l2": _equal_width("l2"),
    "equal_mass_ece": _equal_mass("ece"),
    "equal_mass_mce": _equal_mass("mce"),
    "classwise": _classwise,
    "debiased": _debiased,
    "smooth": SmoothForm,
}


def register_form(name: str, prepare: Callable) -> None:
    """Add a custom resampled form: ``prepare(resampling, metric) -> replicate(block) -> (b,) values``."""
    if name in FORMS:
        raise ValueError(f"a resampled form named {name!r} is already registered")
    FORMS[name] = prepare
