"""RecurrentNetwork / RecurrentNetworkGradient on a recognised LSTMWithAttention
step net (fused_attention_steps.py): the whole decoder sequence in one pass
(kernels/cpu/rnn/fused_attention.py) instead of one step-net run per timestep.

As for the plain LSTM (fused_run.py): the state tensors, hence every output, and
the gradients are the generic loop's up to float rounding; the step workspaces get
the blobs the generic loop leaves there only when something looks at them; and
both functions return None (generic loop, which also reports bad inputs) for
values outside what the kernel does (not float32, initial states of several
steps, lengths of another type, shapes that do not fit).
"""
import numpy as np

from caffe2py.kernels.cpu.rnn import fused_attention as K

from . import fused_run
from .fused_run import _float32, _lengths, _state_grads, gradient_outputs


class FusedAttentionRecord:
    """What a fused forward run leaves in the scratch blob for its gradient."""
    __slots__ = ("plan", "x", "weights", "hs", "cs", "ctxs", "covs", "saved", "seq")

    def __init__(self, plan, x, weights, hs, cs, ctxs, covs, saved, seq):
        self.plan, self.x, self.weights, self.hs, self.cs, self.ctxs = plan, x, weights, hs, cs, ctxs
        self.covs = covs
        self.saved, self.seq = saved, seq


def _shaped(a, shape):
    return _float32(a) and a.shape == shape


def _attention_weights(plan, inputs, x, hs, cs, ctxs, covs):
    """K.AttentionWeights when the kernel can run on these values, else None."""
    if not all(_float32(a) for a in (x, hs, cs, ctxs)) or x.ndim != 3 or hs.ndim != 3 or ctxs.ndim != 3:
        return None
    steps, n, d, e = x.shape[0], x.shape[1], hs.shape[2], plan.dims
    if (steps < 1 or n < 1 or x.shape[2] != 4 * d or hs.shape != (steps + 1, n, d) or cs.shape != hs.shape
            or ctxs.shape != (steps + 1, n, e)
            or not all(a.flags.c_contiguous for a in (hs, cs, ctxs))):
        return None
    get = {role: inputs[k] for role, k in plan.params.items()}
    enc_t = get["enc_t"]
    if not (_float32(enc_t) and enc_t.ndim == 3 and enc_t.shape[:2] == (n, e) and enc_t.shape[2] >= 1):
        return None
    t_enc = enc_t.shape[2]
    if plan.cov_states is not None and not (_shaped(covs, (steps + 1, n, t_enc)) and covs.flags.c_contiguous):
        return None
    want = {"weight": (4 * d, d + e), "bias": (4 * d,), "wd_w": (e, d), "wd_b": (e,), "wc_w": (e, e),
            "wc_b": (e,), "wenc": (t_enc, n, e), "v": (1, e), "bv": (1,), "cw": (t_enc, n, e)}
    if any(not _shaped(value, want[role]) for role, value in get.items() if role != "enc_t"):
        return None
    if "wd_w" not in get and d != e:
        return None
    enc_len = None
    if plan.enc_len is not None:
        enc_len = inputs[plan.enc_len]
        if not (isinstance(enc_len, np.ndarray) and enc_len.dtype == np.int32 and enc_len.size >= n):
            return None                     # SequenceMask takes int32 only: the generic loop says so
        enc_len = enc_len.reshape(-1)[:n].astype(np.int64)
    c = {role: np.ascontiguousarray(value) for role, value in get.items()}
    return K.AttentionWeights(plan.kind != "dot", c["weight"], c["bias"], c.get("wd_w"), c.get("wd_b"),
                              c.get("wc_w"), c.get("wc_b"), c.get("wenc"), c.get("v"), c.get("bv"), c.get("cw"),
                              c["enc_t"], enc_len)


def lstm_attention_forward(plan, inputs, blobs, scratch, step_workspaces, timestep, has_backward):
    """Runs the decoder sequence; fills blobs[state tensors] (made by the caller with
    their initial step). Returns True, or None to ask for the generic loop."""
    x = inputs[0]
    hs, cs, ctxs = (blobs.get(name) for name in (plan.h_states, plan.c_states, plan.ctx_states))
    covs = blobs.get(plan.cov_states) if plan.cov_states is not None else None
    weights = _attention_weights(plan, inputs, x, hs, cs, ctxs, covs)
    if weights is None:
        return None
    seq = _lengths(plan, inputs, x.shape[1])
    if seq is False:
        return None
    x = np.ascontiguousarray(x)
    saved = K.attention_lstm_sequence(x, weights, hs, cs, ctxs, covs, seq, plan.forget_bias, plan.drop_states)
    scratch.set_fused(FusedAttentionRecord(plan, x, weights, hs, cs, ctxs, covs, saved, seq),
                      lambda: _fill_step_workspaces(plan, x, weights, hs, cs, ctxs, covs, saved, step_workspaces,
                                                    timestep, has_backward))
    return True


def _fill_step_workspaces(plan, x, weights, hs, cs, ctxs, covs, saved, step_workspaces, timestep, has_backward):
    """The step workspaces as the generic loop leaves them (each blob's last value in
    the step net): every step's with a backward net, else the two alternating ones."""
    b = plan.blobs
    steps, n, d, e = x.shape[0], x.shape[1], hs.shape[2], plan.dims
    masked = weights.masked()
    for t in (range(steps) if has_backward else range(max(0, steps - 2), steps)):
        ws = step_workspaces[t if has_backward else t % 2]
        s, s1 = slice(t, t + 1), slice(t + 1, t + 2)
        logits = saved.logits[t]
        values = {"timestep": np.array([t], np.int32), "input_t": x[s], "h_prev": hs[s], "h": hs[s1],
                  "h_ext": hs[s1], "c_prev": cs[s], "c": cs[s1], "ctx_prev": ctxs[s], "ctx": ctxs[s1],
                  "cat": np.concatenate([hs[s], ctxs[s]], axis=2), "cat_dims": np.array([d, e], np.int32),
                  "gates": saved.gates[s], "logits_t": logits[:, :, None],
                  "weights": saved.weights[t][:, :, None], "old_shape": np.array([n, e, 1], np.int64)}
        if plan.kind in ("regular", "coverage"):
            values.update(wd=saved.q[t], summed=saved.summed[t], logits=logits.T[:, :, None])
            if plan.kind == "coverage":
                values.update(cov_prev=covs[s], cov=covs[s1], cov_2d=covs[t], cov_t=covs[t].T,
                              scaled_cov=weights.cw * covs[t].T[:, :, None], weights_2d=saved.weights[t])
        elif plan.kind == "recurrent":
            values.update(wpc=ctxs[t] @ weights.wc.T + weights.bc, wd=hs[t + 1] @ weights.wd.T + weights.bd,
                          query=saved.q[t], summed=saved.summed[t], logits=logits.T[:, :, None])
        else:
            values.update(query=saved.q[t][:, :, None])
            if "wd_w" in plan.params:
                values["wd"] = saved.q[s]
        if masked is not None:
            values["masked"] = np.where(masked, np.float32(-np.inf), logits)[:, :, None]
        for role, value in values.items():
            ws[b[role]] = value


def lstm_attention_backward(record, roles, inputs, n_go, per_step, last_step, states, state_inputs, blobs,
                            input_grad_name):
    """The gradient op's outputs (input projection, parameters in `roles` order,
    initial states) from the fused forward's record, or None for the generic loop."""
    plan = record.plan
    hs, cs, ctxs = record.hs, record.cs, record.ctxs
    forward_x = inputs[n_go]
    if not isinstance(forward_x, np.ndarray) or forward_x.shape != record.x.shape:
        return None
    tensors = [(plan.h_states, hs), (plan.c_states, cs), (plan.ctx_states, ctxs)]
    if plan.cov_states is not None:
        tensors.append((plan.cov_states, record.covs))
    if any(blobs.get(name) is not value for name, value in tensors):
        return None                 # the states were replaced since: the generic path reads them
    if sorted(states) != sorted(name for name, _ in tensors):
        return None
    grads = {}
    for name, value in tensors:     # _state_grads takes states of one shape
        grad = _state_grads(value, inputs, [name], per_step, last_step)
        if grad is None:
            return None
        grads.update(grad)
    by_role = K.attention_lstm_sequence_gradient(
        record.x.shape, record.weights, hs, cs, ctxs, record.covs, record.saved, record.seq, plan.forget_bias,
        plan.drop_states, grads[plan.h_states], grads[plan.c_states], grads[plan.ctx_states],
        grads.get(plan.cov_states))
    return gradient_outputs(by_role["input"], by_role, grads, roles, inputs, n_go, states, state_inputs, blobs,
                            input_grad_name)


# RecurrentNetwork finds each kind's runner on fused_run (`<kind>_forward`); fused_run
# cannot import this module (this one imports its helpers), so the kind is added here.
fused_run.lstm_attention_forward = lstm_attention_forward
fused_run.lstm_attention_backward = lstm_attention_backward
