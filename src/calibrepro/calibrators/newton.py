"""Penalised multinomial logistic regression ``softmax(W x + b)`` by preconditioned Newton-CG.

The objective (Kull et al. 2019, sec. 3, the fit of :mod:`.dirichlet`) is

    f(W, b) = 1/N sum_n [logsumexp(s_n) - s_{n, y_n}] + 1/2 sum_ij cw_ij (w_ij - c_ij)^2 + 1/2 cb |b|^2,
    s_n = W x_n + b,

with the penalty weights ``cw``, ``cb`` of Dir-L2 or ODIR (see :func:`penalty_weights`) and the
penalty's centre ``C`` (0, or the identity for Dir-L2 centred on the uncalibrated map).  It is
smooth and convex, strongly convex when every direction is penalised.  A Newton method fits it
in a few iterations where first-order methods need thousands at weak regularisation (measured:
L-BFGS-B stopped at its 2,000-iteration cap at K = 100, lambda = 0.01).

Newton step.  The Hessian of the softmax NLL is never formed: its product with a direction
``(V, d)`` is ``R^T x / N`` and ``1^T R / N`` with ``R = P * dS - P * rowsum(P * dS)``,
``dS = x V^T + d`` (Böhning 1992, "Multinomial logistic regression algorithm", the Hessian
``diag(p) - p p^T`` per sample; Nocedal & Wright 2006, "Numerical Optimization", sec. 7.1,
Hessian-free Newton-CG), two ``N x K x K`` products like one gradient.  The step solves
``H p = -g`` by preconditioned conjugate gradients, stopped at the forcing tolerance
``|r| <= min(0.5, sqrt|g|) |g|`` (Nocedal & Wright, Algorithm 7.1: inexact Newton,
superlinear), then a backtracking Armijo line search (sufficient decrease 1e-4).

Preconditioner.  Per class i the parameters ``(W_i., c_i)`` have the diagonal block
``X~^T diag(p_.i (1 - p_.i)) X~ / N`` of ``H`` plus the penalty (``X~ = [x - m, 1]``).  On the CPU
each block is approximated by its heaviest samples exactly and the rest by a diagonal
(:meth:`SoftmaxRegression._sampled_blocks`, inverted by the Woodbury identity: O(K^2 s) memory and
work for s = 33 rows per class, one N x K x K product to form), on a GPU by its diagonal plus the
penalty's exact rank one (:meth:`SoftmaxRegression._diagonal_rank_one`): the intercept
``b_i = c_i - W_i. m`` is penalised, which adds ``cb a a^T``, ``a = (-m, 1)``, to the block; on
Dirichlet features ``m`` is large (the mean log-probabilities) and this rank one dominates the
block.  Both are recomputed at every Newton iteration.  To either is added the exact inverse of
``H`` on the K + 1 directions that shift every class's parameters alike, where the softmax is flat
and only the penalty curves ``H`` (:meth:`SoftmaxRegression._shift_correction`).  Measured on one
fold's default paths (``benchmarks/bench_newton_path.py``, K = 100, 4,000 samples; Dir-ODIR /
MS-ODIR / Dir-L2): 951 / 718 / 346 Hessian products with the plain diagonal, 344 / 196 / 165 with
the diagonal plus rank one, 233 / 167 / 80 with the shift correction added, 178 / 192 / 137 with
the exact blocks (block Jacobi, used up to K = 320 until issue 18's third session), 152 / 116 / 53
with the sampled blocks and the shift correction.  At K = 320 (6,400 samples, Dir-ODIR, the
strongest lambda) 1,044 / 173 / 147 (diagonal plus rank one / exact blocks / sampled blocks).
Tried and not kept: the features' correlation matrix scaled per class (a Kronecker
approximation of each block; 25-100 % more CG iterations than the diagonal at K = 10 and 100);
each block's exact diagonal in the eigenbasis of the features' covariance (EKFAC: George et al.
2018, "Fast approximate natural gradient descent in a Kronecker-factored eigenbasis"), also with
the classes' Kronecker factor: without the rank one, 40,624 / 1,293 / 382 products on the paths
above; with it, the preconditioned Hessian's condition number (formed at K = 20, 1,600 samples,
four (method, lambda, mu)) was 1.3-4x that of the diagonal plus rank one: a basis shared by all
classes loses each block's class-specific diagonal (a class's own feature).

Precision.  Loss and gradient are computed in float64; the Hessian products, which only choose
the search direction, in float32 (measured at K = 100: 2.5x faster products, the same fitted
parameters to the tolerance; the stopping test is on the float64 gradient).

Stopping.  Converged when the largest absolute entry of the float64 gradient is at most
``tolerance`` (default 1e-6), or at most the bound on its own rounding error where an extreme
penalty makes that larger (:meth:`SoftmaxRegression._rounding_floor`; the reason says so);
otherwise the fit stops after ``max_iter`` Newton iterations or when the line search cannot
decrease the loss, and says so (``converged: false`` and the reason).

Coordinates.  As before (centred features ``x - m``, ``m`` the column means, and ``c = b + W m``):
the same model and objective, but better conditioned, so fewer CG iterations.

Determinism.  Every operation runs in a fixed order in the calling thread with single-threaded
BLAS (:func:`calibrepro.calibrators.dirichlet.one_blas_thread`), so results are bit-identical on
the CPU whichever thread runs a fit and however many run at once.
"""

from __future__ import annotations

import math
import numpy as np
from calibrepro.calibrators.base import exp64, log64

#: Armijo sufficient-decrease constant, the most halvings of a step, the most CG iterations per step
_ARMIJO = 1e-4
_MAX_HALVINGS = 40
_MAX_CG = 250
#: at most this many parameters K (K + 1): the Newton step from the formed Hessian (K <= 31)
_DENSE_MAX = 1000
#: the sampled-block preconditioner (CPU): per class its block's heaviest samples exactly, at most this many,
#: the rest by the diagonal, which keeps at least ``_REST_FLOOR`` of the whole block's diagonal (measured, one
#: fold's two strongest lambdas, 6,400 samples: at K = 320 floor 1e-6, 1e-8 or 0 needed 2,325-4,201 Hessian
#: products for Dir-ODIR against 239 at 1e-3, nearly all in the second lambda's first fit; Dir-L2, MS-ODIR
#: and K = 100 the same products at every floor)
_SAMPLED_ROWS = 32
_REST_FLOOR = 1e-3
#: the sampled blocks on the CPU (False: the GPU's diagonal plus rank one there too; tests, benchmarks)
_SAMPLED_BLOCKS = True
#: the exact inverse on the softmax's flat directions added to either preconditioner (CG steps; without it,
#: measured on the same paths: K = 320 Dir-L2 / Dir-ODIR / MS-ODIR 119 / 175 / 133
#: Hessian products against 84 / 239 / 125, K = 100 91 / 192 / 132 against 54 / 154 / 94)
_SHIFT_CORRECTION = True


def penalty_weights(penalty: str, k: int, lam: float, mu: float) -> tuple[np.ndarray, float]:
    """``(cw, cb)``: twice the per-entry penalty weights of W and b (Kull et al. 2019, sec. 3).

    L2: ``lambda / (K (K + 1))`` on every entry of W and b; ODIR: ``lambda / (K (K - 1))`` on the
    off-diagonal entries of W and ``mu / K`` on b.
    """
    if penalty == "l2":
        weight = 2.0 * lam / (k * (k + 1))
        return np.full((k, k), weight), weight
    return (1.0 - np.eye(k)) * (2.0 * lam / (k * (k - 1))), 2.0 * mu / k


class _Numpy:
    """The array operations the solver needs, for numpy (CPU); :class:`_Torch` mirrors them."""

    float32, float64 = np.float32, np.float64

    def __init__(self, device=None):
        self.device = device

    def to(self, a):
        return a

    def numpy(self, a) -> np.ndarray:
        return a

    def cast(self, a, dtype):
        return a.astype(dtype)

    def rowmax(self, s):
        return s.max(axis=1, keepdims=True)

    exp, log, maximum = staticmethod(exp64), staticmethod(log64), np.maximum
    zeros_like = staticmethod(np.zeros_like)


class _Torch(_Numpy):
    """:class:`_Numpy`'s operations on torch tensors on ``device`` (a GPU)."""

    def __init__(self, device):
        import torch

        self.torch, self.device = torch, device
        self.float32, self.float64 = torch.float32, torch.float64
        self.exp, self.log, self.zeros_like, self.maximum = torch.exp, torch.log, torch.zeros_like, torch.maximum

    def to(self, a):
        return self.torch.from_numpy(np.ascontiguousarray(a)).to(self.device)

    def numpy(self, a) -> np.ndarray:
        return a.cpu().numpy()

    def cast(self, a, dtype):
        return a.to(dtype)

    def rowmax(self, s):
        return self.torch.amax(s, dim=1, keepdim=True)


def array_ops(device) -> _Numpy:
    """numpy on the CPU, torch on any other torch device (``device.type``)."""
    return _Numpy() if device is None or device.type == "cpu" else _Torch(device)


class SoftmaxRegression:
    """The data of one fit: features ``x`` (N, K) float64 and labels ``y`` (N,), on ``ops``'s device."""

    def __init__(self, x, y, ops: _Numpy | None = None):
        self.ops = ops = ops or _Numpy()
        x = np.asarray(x, dtype=np.float64)
        self.n, self.k = x.shape
        self.m = x.mean(axis=0)
        xc = x - self.m
        self._xc = ops.to(xc)
        self._xc32 = ops.to(xc.astype(np.float32))
        self._xc2 = ops.to((xc * xc).astype(np.float32))
        self._label_at = ops.to(np.arange(self.n) * self.k + np.asarray(y, dtype=np.int64))
        self._ones_n, self._ones_n32 = ops.to(np.ones(self.n)), ops.to(np.ones(self.n, np.float32))
        self._ones_k, self._ones_k32 = ops.to(np.ones(self.k)), ops.to(np.ones(self.k, np.float32))
        self._m = ops.to(self.m)
        self._buffer = None  # the sampled blocks' rows during a fit (:meth:`_sampled_blocks`)

    # --- float64 loss and gradient -----------------------------------------------------------
    def _scores(self, w, c):
        s = self._xc @ w.T
        s += c
        return s

    def _loss(self, s, w, c, cw, cb, centre=None):
        """(loss, nll, probabilities P) at scores ``s`` (overwritten by P); W's penalty is centred on ``centre`` (None: 0)."""
        ops = self.ops
        s -= ops.rowmax(s)
        picked = s.reshape(-1)[self._label_at].sum()
        ops.exp(s, out=s)
        total = s @ self._ones_k
        nll = float((ops.log(total).sum() - picked) / self.n)
        s /= total[:, None]
        b = c - w @ self._m
        d = w if centre is None else w - centre
        penalty = 0.5 * (float((cw * d * d).sum()) + cb * float(b @ b))
        return nll + penalty, nll, s

    def gradient(self, p, w, c, cw, cb, centre=None):
        """Gradient ``(gW, gc)`` from the probabilities ``p`` (overwritten with ``P - Y``)."""
        p.reshape(-1)[self._label_at] -= 1.0
        pb = cb * (c - w @ self._m)
        gw = (p.T @ self._xc) / self.n
        gw += cw * (w if centre is None else w - centre)
        gw -= pb[:, None] * self._m[None, :]
        gc = (self._ones_n @ p) / self.n + pb
        return gw, gc

    # --- float32 Hessian products --------------------------------------------------------------
    def hessian_parts(self, p, cw, cb):
        """(float32 probabilities, the preconditioner ``(rW, rc) -> M^-1 (rW, rc)`` at ``p``).

        The sampled blocks on the CPU (:meth:`_sampled_blocks`), the diagonal plus rank one on a GPU
        (:meth:`_diagonal_rank_one`).
        """
        ops = self.ops
        p32 = ops.cast(p, ops.float32)
        if ops.device is None and _SAMPLED_BLOCKS:
            return p32, self._sampled_blocks(p32, cw, cb)
        return p32, self._diagonal_rank_one(p32, cw, cb)

    def _diagonal_rank_one(self, p32, cw, cb):
        """Per class i, ``M_i = D_i + cb a a^T`` on the parameters ``(W_i., c_i)``, inverted exactly.

        ``D_i`` the diagonal of the data Hessian plus ``cw_i.``, ``a = (-m, 1)`` the exact penalty
        of the intercept ``b_i = c_i - W_i. m`` (rank one), inverted by the Sherman-Morrison formula;
        one N x K x K product to form, O(K^2) to apply.
        """
        ops = self.ops
        v = p32 * (1.0 - p32)
        dw = ops.cast((v.T @ self._xc2) / self.n, ops.float64) + cw
        dc = ops.cast((self._ones_n32 @ v) / self.n, ops.float64)
        inv_w, inv_c = 1.0 / ops.maximum(dw, 0 * dw + 1e-12), 1.0 / ops.maximum(dc, 0 * dc + 1e-12)
        m = self._m
        # Sherman-Morrison: (D + cb a a^T)^-1 r = D^-1 r - cb D^-1 a (a^T D^-1 r) / (1 + cb a^T D^-1 a)
        scale = cb / (1.0 + cb * ((inv_w * (m * m)[None, :]) @ self._ones_k + inv_c))

        def precondition(rw, rc):
            zw, zc = rw * inv_w, rc * inv_c
            t = (zc - zw @ m) * scale  # cb (a^T D^-1 r) / (1 + cb a^T D^-1 a) per class
            return zw + (t[:, None] * inv_w) * m[None, :], zc - t * inv_c

        return precondition

    def _sampled_blocks(self, p32, cw, cb):
        """Per class i, ``M_i = D_i + U_i^T U_i``: its block's heaviest samples exactly, the rest by a diagonal.

        Class i's data block ``X~^T diag(v_.i) X~ / N`` (``v = p (1 - p)``, ``X~ = [x - m, 1]``) weighs
        the samples by how plausible class i is for them, so a few samples carry most of it.  The
        rows of ``U_i`` are ``sqrt(v_ni / N) x~_n`` for the ``_SAMPLED_ROWS`` samples n with the
        largest ``v_ni`` and ``sqrt(cb) a``, ``a = (-m, 1)`` (the intercept's penalty, as in
        :meth:`_diagonal_rank_one`); ``D_i`` is the diagonal of the other samples' part (at least
        ``_REST_FLOOR`` times the whole block's diagonal) plus ``cw_i.``.  Inverted by the Woodbury
        identity ``M^-1 = D^-1 - D^-1 U^T (I + U D^-1 U^T)^-1 U D^-1`` (Hager 1989, "Updating the
        inverse of a matrix", SIAM Review 31) in float64 (in float32 CG stalled at K = 200): one
        N x K x K product and O(K^2 s) work to form, O(K^2 s) memory and work to apply (s = 33).

        Measured on one fold's default paths (``benchmarks/bench_newton_path.py``): K = 320 with 6,400
        samples, Dir-ODIR's strongest lambda: 147 Hessian products against the diagonal plus rank
        one's 1,044 and the exact blocks' 173 (their formation alone ~160 products' time); K = 100
        (4,000 samples), Dir-ODIR / MS-ODIR / Dir-L2: 152 / 116 / 53 against the exact blocks' 178 /
        192 / 137.  The exact blocks (K (K+1)^2 floats: 4 GB at K = 1000) are no longer used.
        """
        n, k = self.n, self.k
        s = min(_SAMPLED_ROWS, n)
        vt = p32.T * (1.0 - p32.T)  # (K, N), each class's weights contiguous
        whole_w = ((vt @ self._xc2) / n).astype(np.float64)
        whole_c = vt.sum(axis=1, dtype=np.float64) / n
        rows = np.argpartition(-vt, s - 1, axis=1)[:, :s]  # (K, s): each class's heaviest samples
        root = np.sqrt(np.take_along_axis(vt, rows, axis=1).astype(np.float64) / n)  # (K, s)
        # one buffer per fit (freed by :meth:`fit`), filled in chunks: at K = 1000 a fresh 264 MB array per
        # Newton iteration and one fancy-indexing copy took 1 s of the 2.5 s formation
        if self._buffer is None or self._buffer.shape != (k, s + 1, k + 1):
            self._buffer = np.empty((k, s + 1, k + 1))
        u = self._buffer
        for i in range(0, k, 64):
            u[i : i + 64, :s, :k] = self._xc32[rows[i : i + 64]]
        u[:, :s, :k] *= root[:, :, None]
        u[:, :s, k] = root
        u[:, s, :k], u[:, s, k] = -math.sqrt(cb) * self.m, math.sqrt(cb)
        rest_w = whole_w - np.einsum("isj,isj->ij", u[:, :s, :k], u[:, :s, :k])
        rest_c = whole_c - np.einsum("is,is->i", root, root)
        inv_d = np.empty((k, k + 1))
        inv_d[:, :k] = np.maximum(rest_w, _REST_FLOOR * whole_w) + cw
        inv_d[:, k] = np.maximum(rest_c, _REST_FLOOR * whole_c)
        inv_d = 1.0 / np.maximum(inv_d, 1e-12)
        u *= np.sqrt(inv_d)[:, None, :]
        g = np.matmul(u, u.transpose(0, 2, 1))  # (K, s+1, s+1): U D^-1 U^T
        g[:, np.arange(s + 1), np.arange(s + 1)] += 1.0
        inner = np.linalg.inv(g)
        u *= np.sqrt(inv_d)[:, None, :]  # now U D^-1

        def precondition(rw, rc):
            r = np.concatenate([rw, rc[:, None]], axis=1)
            t = np.matmul(inner, np.matmul(u, r[:, :, None]))  # (I + U D^-1 U^T)^-1 U D^-1 r
            z = r * inv_d - np.matmul(u.transpose(0, 2, 1), t)[:, :, 0]
            return np.ascontiguousarray(z[:, :k]), np.ascontiguousarray(z[:, k])

        return precondition

    def hessp(self, p32, v, d, cw, cb):
        """``H (V, d)`` at the probabilities ``p32``: the data term in float32, the penalty in float64."""
        ops = self.ops
        r = self._xc32 @ ops.cast(v, ops.float32).T
        r += ops.cast(d, ops.float32)
        r *= p32
        r -= p32 * (r @ self._ones_k32)[:, None]
        hv = ops.cast(r.T @ self._xc32, ops.float64) / self.n
        hd = ops.cast(self._ones_n32 @ r, ops.float64) / self.n
        db = d - v @ self._m
        hv += cw * v
        hv -= cb * db[:, None] * self._m[None, :]
        hd += cb * db
        return hv, hd

    def _shift_correction(self, cw, cb):
        """``(rW, rc) -> Z E^+ Z^T (rW, rc)``: the exact inverse of ``H`` on the softmax's flat directions.

        Adding one vector ``(u, u_0)`` to every class's parameters ``(W_i., c_i)`` leaves every
        softmax, so the data term, unchanged: on these K + 1 directions (the columns of ``Z``)
        only the penalty curves ``H``, and ``E = Z^T H Z = diag(sum_i cw_i., 0) + K cb a a^T``
        exactly (``a = (-m, 1)``).  A per-class preconditioner sees the data's curvature there
        instead, up to 1/(penalty weight) too large; added to it, this coarse term (a two-level,
        deflation-type preconditioner: Nicolaides 1987, "Deflation of conjugate gradients with
        applications to boundary value problems", SIAM J. Numer. Anal. 24) makes the preconditioned
        Hessian well conditioned also at weak regularisation.  ``E^+`` (pseudo-inverse: a flat
        direction without penalty stays to CG's curvature test) once per fit, O(K^2) to apply.
        """
        ops, k = self.ops, self.k
        a = np.append(-self.m, 1.0)
        e = (k * cb) * np.outer(a, a)
        e[np.arange(k), np.arange(k)] += ops.numpy(cw).sum(axis=0)
        values, vectors = np.linalg.eigh(e)
        keep = values > 1e-12 * max(float(values.max()), 0.0)
        inverse = (vectors[:, keep] / values[keep]) @ vectors[:, keep].T if keep.any() else np.zeros_like(e)
        e_ww, e_wc, e_cc = ops.to(inverse[:k, :k]), ops.to(inverse[:k, k]), float(inverse[k, k])
        ones = self._ones_k

        def correction(rw, rc):
            sw, sc = ones @ rw, float(rc.sum())
            return (e_ww @ sw + e_wc * sc)[None, :], e_wc @ sw + e_cc * sc

        return correction

    def nll_sum(self, w, b) -> float:
        """Summed NLL of ``softmax(x W^T + b)`` on this data (held-out scoring), float64."""
        w, c = self.ops.to(np.asarray(w, dtype=np.float64)), self.ops.to(np.asarray(b + w @ self.m, dtype=np.float64))
        _, nll, _ = self._loss(self._scores(w, c), w, c, 0.0, 0.0)
        return nll * self.n

    # --- the solver ---------------------------------------------------------------------------
    def fit(self, cw, cb: float, w0, b0, *, tolerance: float, max_iter: int, centre=None):
        """Minimise the penalised objective from ``(w0, b0)``; return ``(W, b, info)`` (numpy).

        ``centre``: the matrix W's penalty shrinks towards, ``1/2 sum_ij cw_ij (w_ij - centre_ij)^2``
        (None: 0, the paper's L2; the identity: Dir-L2 centred on the uncalibrated map).  The Hessian
        and so the Newton step's preconditioners do not depend on it.
        """
        ops = self.ops
        cw = ops.to(np.asarray(cw, dtype=np.float64))
        centre = None if centre is None else ops.to(np.asarray(centre, dtype=np.float64))
        w0 = np.asarray(w0, dtype=np.float64)
        w, c = ops.to(w0.copy()), ops.to(np.asarray(b0, dtype=np.float64) + w0 @ self.m)
        loss, nll, p = self._loss(self._scores(w, c), w, c, cw, cb, centre)
        initial = loss
        gw, gc = self.gradient(p, w, c, cw, cb, centre)
        evaluations, products = 1, 0
        reason, converged, iterations = "", False, 0
        grad_max = _max_abs(gw, gc)
        coarse = None  # this fit's correction on the softmax's flat directions, made at its first CG step
        while True:
            if grad_max <= tolerance:
                converged, reason = True, f"gradient max-abs {grad_max:.1e} <= tolerance {tolerance:g}"
                break
            floor = self._rounding_floor(w, c, cw, cb)
            if grad_max <= floor:
                converged = True
                reason = f"gradient max-abs {grad_max:.1e} <= its rounding error {floor:.1e} (above the tolerance {tolerance:g})"
                break
            if iterations >= max_iter:
                reason = f"max_iter = {max_iter} Newton iterations reached (gradient max-abs {grad_max:.1e})"
                break
            iterations += 1
            p.reshape(-1)[self._label_at] += 1.0  # back from P - Y to P
            if self.k * (self.k + 1) <= _DENSE_MAX and self.ops.device is None:
                sw, sc = self._dense_direction(p, gw, gc, cw, cb)
                precondition = None  # made below only if the exact step is not a descent direction
            else:
                p32, precondition = self.hessian_parts(p, cw, cb)
                coarse = coarse or self._shift_correction(cw, cb)
                precondition = _added(precondition, coarse)
                sw, sc, used = self._newton_direction(p32, gw, gc, precondition, cw, cb)
                products += used
            slope = _dot(gw, sw, gc, sc)
            if not slope < 0.0:  # not a descent direction (float32 rounding): preconditioned steepest descent
                precondition = precondition or self._diagonal_rank_one(ops.cast(p, ops.float32), cw, cb)
                sw, sc = precondition(-gw, -gc)
                slope = _dot(gw, sw, gc, sc)
            step = 1.0
            for _ in range(_MAX_HALVINGS):
                w_new, c_new = w + step * sw, c + step * sc
                new_loss, new_nll, new_p = self._loss(self._scores(w_new, c_new), w_new, c_new, cw, cb, centre)
                evaluations += 1
                if new_loss <= loss + _ARMIJO * step * slope:
                    break
                step *= 0.5
            else:
                reason = f"the line search found no decrease (gradient max-abs {grad_max:.1e})"
                break
            w, c, loss, nll, p = w_new, c_new, new_loss, new_nll, new_p
            gw, gc = self.gradient(p, w, c, cw, cb, centre)
            grad_max = _max_abs(gw, gc)
        self._buffer = None
        w_np, c_np = ops.numpy(w), ops.numpy(c)
        info = {
            "optimizer": "Newton-CG (Hessian-vector products, sampled-block or diagonal-plus-rank-one preconditioner, Armijo line search)",
            "tolerance": tolerance,
            "n_iter": iterations,
            "n_eval": evaluations,
            "n_hessp": products,
            "initial_loss": initial,
            "final_loss": loss,
            "final_nll": nll,
            "final_grad_max_abs": grad_max,
            "stop_reason": reason,
            "converged": converged,
        }
        return w_np, c_np - w_np @ self.m, info

    def _rounding_floor(self, w, c, cw, cb: float) -> float:
        """A bound on the float64 rounding error of the gradient at ``(W, c)``: below it no step can lower it.

        The intercept ``b = c - W m`` is a difference of numbers up to ``|c| + |W| |m|`` (the centred
        coordinates), so it carries up to eps times that; the penalty multiplies this by ``cb`` in
        ``gc`` and by ``cb |m|`` in ``gW``; W's own penalty adds ``cw eps |W|``; twice the sum.  It
        exceeds the tolerance only for extreme penalties on features with a large mean (Dir-L2 at
        K = 10, lambda = 1e9, on Dirichlet features with ``|m|`` up to 60: bound 1e-5, the gradient
        stalled at 1.4e-6-1.7e-6 in 3 of 5 folds for 100 Newton iterations, the parameters within
        1e-8 of the identity); everywhere else it is many orders below 1e-6.
        """
        ops, m = self.ops, np.abs(self.m)
        w, c, cw = np.abs(ops.numpy(w)), np.abs(ops.numpy(c)), np.abs(ops.numpy(cw))
        spread = float(np.max(c + w @ m))
        return 2.0 * np.finfo(np.float64).eps * (cb * spread * max(1.0, float(m.max())) + float(np.max(cw * (1.0 + w))))

    def _dense_direction(self, p, gw, gc, cw, cb):
        """The exact Newton step from the formed Hessian (few parameters: cheaper than CG, and exact).

        Per class i the parameters are ``(W_i., c_i)``; the data Hessian is ``blockdiag_i(X~^T
        diag(P_.i) X~) - U^T U`` over N, ``X~ = [x - m, 1]``, ``U_n = p_n (x) x~_n`` (Böhning 1992);
        the penalty adds ``cw`` on the diagonal and ``cb a a^T``, ``a = (-m, 1)``, per class block.
        Solved by Cholesky with the smallest diagonal shift that succeeds (an unpenalised flat direction).
        """
        from scipy.linalg import LinAlgError, cho_factor, cho_solve

        k, n = self.k, self.n
        xt = np.hstack([self._xc, np.ones((n, 1))])
        u = (p[:, :, None] * xt[:, None, :]).reshape(n, k * (k + 1))
        h = -(u.T @ u)
        a = np.append(-self.m, 1.0)
        for i in range(k):
            block = slice(i * (k + 1), (i + 1) * (k + 1))
            h[block, block] += (xt * p[:, i : i + 1]).T @ xt + (cb * n) * np.outer(a, a)
        h /= n
        h[np.diag_indices_from(h)] += np.hstack([cw, np.zeros((k, 1))]).reshape(-1)
        g = np.hstack([gw, gc[:, None]]).reshape(-1)
        shift = 0.0
        while True:
            try:
                factor = cho_factor(h + shift * np.eye(len(g)) if shift else h)
                break
            except LinAlgError:
                shift = max(shift * 100.0, 1e-12 * float(np.abs(np.diag(h)).max()))
        s = cho_solve(factor, -g).reshape(k, k + 1)
        return np.ascontiguousarray(s[:, :k]), np.ascontiguousarray(s[:, k])

    def _newton_direction(self, p32, gw, gc, precondition, cw, cb):
        """Preconditioned CG on ``H s = -g`` to the forcing tolerance (Nocedal & Wright, Alg. 5.3, 7.1)."""
        ops = self.ops
        g_norm = math.sqrt(_dot(gw, gw, gc, gc))
        forcing = min(0.5, math.sqrt(g_norm)) * g_norm
        sw, sc = ops.zeros_like(gw), ops.zeros_like(gc)
        rw, rc = -gw, -gc
        zw, zc = precondition(rw, rc)
        dw, dc = zw, zc
        rz = _dot(rw, zw, rc, zc)
        for j in range(_MAX_CG):
            hw, hc = self.hessp(p32, dw, dc, cw, cb)
            curvature = _dot(dw, hw, dc, hc)
            if not curvature > 0.0:  # a flat direction (no penalty on it): keep the step so far
                return (zw, zc, j + 1) if j == 0 else (sw, sc, j + 1)
            alpha = rz / curvature
            sw, sc = sw + alpha * dw, sc + alpha * dc
            rw, rc = rw - alpha * hw, rc - alpha * hc
            if math.sqrt(_dot(rw, rw, rc, rc)) <= forcing:
                return sw, sc, j + 1
            zw, zc = precondition(rw, rc)
            rz_new = _dot(rw, zw, rc, zc)
            dw, dc = zw + (rz_new / rz) * dw, zc + (rz_new / rz) * dc
            rz = rz_new
        return sw, sc, _MAX_CG


def _added(precondition, correction):
    """The additive two-level preconditioner ``(rW, rc) -> M^-1 r + Z E^+ Z^T r``."""
    if not _SHIFT_CORRECTION:
        return precondition

    def both(rw, rc):
        zw, zc = precondition(rw, rc)
        uw, uc = correction(rw, rc)
        return zw + uw, zc + uc

    return both


def _dot(a, b, c, d) -> float:
    """``<a, b> + <c, d>`` as a Python float."""
    return float((a * b).sum()) + float((c * d).sum())


def _max_abs(a, b) -> float:
    return max(float(abs(a).max()), float(abs(b).max()))
