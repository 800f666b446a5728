"""Matrix products on BLAS.

Public:
    gemm(a, b, c=None, alpha=1.0, beta=1.0, trans_a=False, trans_b=False) -> y
        ONNX Gemm: alpha * op(a) @ op(b) + beta * c, op = transpose when asked;
        c broadcasts unidirectionally to the (M, N) result.
    fc(x, w, b, transposed=False) -> y
        Caffe2 FC on 2-D x (M, K): x @ w.T + b (w (N, K)), or x @ w + b when
        transposed (w (K, N)).
    matmul(a, b) -> y            NumPy matmul semantics (batched, broadcasting).
Scaling and bias are applied in place on the fresh product, never as extra temporaries.
"""
import numpy as np


def gemm(a, b, c=None, alpha=1.0, beta=1.0, trans_a=False, trans_b=False):
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError("Gemm needs 2-D A and B, got shapes %s and %s" % (list(a.shape), list(b.shape)))
    a2 = a.T if trans_a else a
    b2 = b.T if trans_b else b
    if a2.shape[1] != b2.shape[0]:
        raise ValueError("Gemm inner dimensions differ: op(A) is %s and op(B) is %s"
                         % (list(a2.shape), list(b2.shape)))
    y = np.matmul(a2, b2)
    if alpha != 1.0:
        y *= y.dtype.type(alpha)
    if c is not None and beta != 0.0:
        c = np.asarray(c)
        try:
            np.broadcast_shapes(c.shape, y.shape)
        except ValueError:
            raise ValueError("Gemm C of shape %s does not broadcast to %s" % (list(c.shape), list(y.shape))) from None
        if beta == 1.0:
            y += c
        else:
            y += c * y.dtype.type(beta)
    return y


def fc(x, w, b, transposed=False):
    y = np.matmul(x, w if transposed else w.T)
    if b is not None:
        y += b.reshape(1, -1)
    return y


def matmul(a, b):
    return np.matmul(a, b)
