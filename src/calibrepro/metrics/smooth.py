"""Smooth ECE (Blasiok & Nakkiran 2023, "Smooth ECE: principled reliability diagrams"), as relplot computes it.

A kernel regression of the residual ``conf - correct`` on the top-label confidence, weighted by the
confidences' kernel density, at the bandwidth that equals its own value; no bins.  Fraction.
"""

from __future__ import annotations

import numpy as np

from calibrepro.metrics.bins import check_inputs, top_label


#: relplot's numerical constants (Blasiok & Nakkiran 2023, their reference code): evaluation
#: points of the smoothed residual, floor added to the kernel density, bandwidth search.
SMOOTH_ECE_POINTS = 200
SMOOTH_ECE_DENSITY_FLOOR = 1e-4
SMOOTH_ECE_MIN_BANDWIDTH = 1e-3
SMOOTH_ECE_BISECTIONS = 10


def smooth_grid_size(sigma: float) -> int:
    """Number of grid points the kernel smoothing at bandwidth ``sigma`` uses (as relplot)."""
    return max(2000, round(20 / sigma)) // 2 + 1


def smooth_eval_points(sigma: float) -> np.ndarray:
    """Points of [0, 1] at which the smoothed residual is evaluated (as relplot)."""
    return np.linspace(0.0, 1.0, max(round(10 / sigma), SMOOTH_ECE_POINTS))


def grid_weights(values: np.ndarray, size: int):
    """Linear split of each value between its two neighbouring grid points ``j/(size-1)``."""
    scaled = values * (size - 1)
    left = np.clip(scaled.astype(np.intp), 0, size - 2)
    frac = scaled - left
    return left, frac


def reflected_gaussian_kernel(sigma: float, size: int) -> np.ndarray:
    """Gaussian density of bandwidth ``sigma`` on ``size`` points centred in [0, 1]."""
    t = np.linspace(0.0, 1.0, size)
    return np.exp(-(t - 0.5) * (t - 0.5) / (2 * sigma * sigma)) / (np.sqrt(2 * np.pi) * sigma)


def interpolation_weights(t: np.ndarray, size: int):
    """Left grid index and weight of the right neighbour for evaluating a grid function at ``t``."""
    left = np.clip((t * (size - 1)).astype(np.intp), 0, size - 2)
    step = 1.0 / (size - 1)
    return left, (t - left * step) / step


def _smooth(conf: np.ndarray, values: np.ndarray, sigma: float, t: np.ndarray) -> np.ndarray:
    """Kernel smoothing of each row of ``values`` (c, N), located at ``conf``, evaluated at ``t``.

    Reflected Gaussian kernel on relplot's grid; the convolution by FFT (``scipy.signal.fftconvolve``,
    the same sums as relplot's ``np.convolve`` up to rounding, about 1e-16 relative): the bandwidth
    search reaches grids of 10^4 points, where the direct convolution cost most of smooth ECE's time.
    """
    from scipy.signal import fftconvolve  # here: importing metrics stays light (the workflow's start)

    size = smooth_grid_size(sigma)
    left, frac = grid_weights(conf, size)
    grid = np.stack([np.bincount(left, weights=(1 - frac) * row, minlength=size)
                     + np.bincount(left + 1, weights=frac * row, minlength=size) for row in values])
    reflected = np.concatenate([grid[:, ::-1][:, :-1], grid, grid[:, ::-1][:, 1:]], axis=1)
    smoothed = fftconvolve(reflected, reflected_gaussian_kernel(sigma, size)[None, :], mode="valid", axes=1)
    smoothed = smoothed[:, size // 2 : size // 2 + size]
    i, w = interpolation_weights(t, size)
    return smoothed[:, i] * (1 - w) + smoothed[:, i + 1] * w


def smooth_ece_at(conf: np.ndarray, correct: np.ndarray, sigma: float) -> float:
    """Smooth ECE at a fixed bandwidth ``sigma`` (Blasiok & Nakkiran 2023, Def. 9 / eq. (5)).

    ``smECE_sigma = integral |r_hat(t)| delta_hat(t) dt / integral delta_hat(t) dt`` where
    ``r_hat`` is the Nadaraya-Watson kernel regression of the residual ``conf - correct`` on the
    confidence and ``delta_hat`` the kernel density of the confidences, both with a Gaussian
    kernel reflected at 0 and 1, on relplot's grid (:func:`smooth_grid_size`).
    """
    t = smooth_eval_points(sigma)
    density, residual = _smooth(conf, np.stack([np.ones_like(conf), conf - correct]), sigma, t)
    density = density + SMOOTH_ECE_DENSITY_FLOOR
    residual = residual / density
    return float(np.sum(np.abs(residual) * density) / np.sum(density))


def smooth_ece_bandwidth(conf: np.ndarray, correct: np.ndarray) -> float:
    """The bandwidth of :func:`smooth_ece`: the fixed point ``sigma* = smECE_sigma*`` (bisection).

    Blasiok & Nakkiran (2023), sec. 4: ``smECE_sigma`` decreases in ``sigma``, so the fixed point
    is found by bisection on (0, 1] (10 halvings, as relplot), stopping below 0.001.
    """
    def above(sigma):
        return sigma < SMOOTH_ECE_MIN_BANDWIDTH or sigma < smooth_ece_at(conf, correct, sigma)

    if above(1.0):
        return 1.0
    high, low = 1.0, 0.0
    for _ in range(SMOOTH_ECE_BISECTIONS):
        middle = (high + low) / 2
        if above(middle):
            low = middle
        else:
            high = middle
    return high


def smooth_ece(probs, labels, bins: int = 15) -> float:
    """Smooth ECE of the top label (Blasiok & Nakkiran 2023, "Smooth ECE: principled reliability diagrams").

    ``smECE_sigma*`` (:func:`smooth_ece_at`) at the self-consistent bandwidth
    ``sigma* = smECE_sigma*`` (:func:`smooth_ece_bandwidth`), on the top-label confidence and
    its correctness, exactly as the authors' ``relplot.smECE(conf, correct)``; no bins
    (``bins`` is ignored).  Fraction.
    """
    conf, correct = top_label(*check_inputs(probs, labels))
    return smooth_ece_at(conf, correct, smooth_ece_bandwidth(conf, correct))
