"""caffe2.python.gradient_checker: finite-difference checks of gradient operators.

GradientChecker(stepsize, threshold, device_option=None, workspace_name="gradient_check",
                input_device_options=None)
    .CheckSimple(op, inputs, input_to_check, outputs_with_grads, grad_ops=None,
                 input_device_options=None, ensure_outputs_are_inferred=False)
        -> (ret, grad, grad_estimate)

As Caffe2's: the loss is 0.5 * sum of squares of the outputs in outputs_with_grads,
so each such output's gradient is the output itself; the analytic gradient of input
`input_to_check` comes from the op's registered gradient ops (or grad_ops), the
estimate from central differences (stepsize) of the loss, and they agree when
np.isclose(grad, estimate, atol=threshold, rtol=threshold) everywhere. A sparse
gradient (GradientSlice) is densified (values added at their indices). The checker
runs in its own workspace and switches back afterwards. The forward op is compiled
once as a net and re-run for each perturbation; the loss is summed in float64.

NetGradientChecker.Check / CompareNets check whole nets (AddGradientOperators) the
same way.
"""
import numpy as np

from . import workspace
from .errors import Caffe2Error
from .gradients import GradientSlice, get_gradient_for_op
from .proto import caffe2_pb2


def getGradientForOp(op):
    return get_gradient_for_op(op, [s + "_grad" for s in op.output])


def _densify(grad, like_shape):
    """A GradientSlice's values added into zeros of the input's shape."""
    indices = np.asarray(workspace.FetchBlob(grad.indices)).astype(np.int64).reshape(-1)
    values = np.asarray(workspace.FetchBlob(grad.values))
    dense = np.zeros(like_shape, dtype=np.float64)
    np.add.at(dense, indices, values.reshape((indices.size,) + tuple(like_shape[1:])))
    return dense


class GradientChecker:
    """Finite-difference check of one operator's gradient (see the module docstring)."""

    def __init__(self, stepsize, threshold, device_option=None, workspace_name="gradient_check",
                 input_device_options=None):
        self._stepsize = stepsize
        self._threshold = threshold
        self._device_option = device_option or caffe2_pb2.DeviceOption()
        self._workspace_name = workspace_name
        self._input_device_options = dict(input_device_options or {})

    # -- one evaluation
    def _feed(self, op, inputs, device_options):
        for name, value in zip(op.input, inputs):
            workspace.FeedBlob(name, value, device_options.get(name, self._device_option))

    def _loss(self, op, outputs_with_grads, feed_grads):
        loss = 0.0
        for idx in outputs_with_grads:
            name = op.output[idx]
            out = np.asarray(workspace.FetchBlob(name))
            loss += 0.5 * float(np.sum(np.square(out.astype(np.float64))))
            if feed_grads:
                workspace.FeedBlob(name + "_grad", out, self._device_option)
        return loss

    def GetLossAndGrad(self, op, grad_ops, inputs, input_names, input_to_check, grad_name,
                       outputs_with_grads=None):
        """Caffe2's helper: run the op and its gradient ops once; (loss, gradient).

        Also takes Caffe2's older six-argument form
        GetLossAndGrad(op, grad_ops, x, input_name, grad_name, outputs_with_grads),
        which feeds only x (as input_name) and leaves the other inputs as they are."""
        if outputs_with_grads is None:
            x, name = inputs, input_names
            grad_name, outputs_with_grads = input_to_check, grad_name
            workspace.FeedBlob(name, x, self._input_device_options.get(name, self._device_option))
            inputs, input_to_check = [x], 0
        else:
            self._feed(op, inputs, self._input_device_options)
        workspace.RunOperatorOnce(op)
        loss = self._loss(op, outputs_with_grads, feed_grads=True)
        workspace.RunOperatorsOnce(grad_ops)
        if isinstance(grad_name, GradientSlice):
            return loss, _densify(grad_name, inputs[input_to_check].shape)
        return loss, np.asarray(workspace.FetchBlob(grad_name))

    def CheckSimple(self, op, inputs, input_to_check, outputs_with_grads, grad_ops=None,
                    input_device_options=None, ensure_outputs_are_inferred=False):
        """Returns (ret, grad, grad_estimate): ret is True when they agree."""
        old_ws = workspace.CurrentWorkspace()
        if self._workspace_name != old_ws:
            workspace.SwitchWorkspace(self._workspace_name, True)
        try:
            return self._check(op, inputs, input_to_check, outputs_with_grads, grad_ops,
                               input_device_options, ensure_outputs_are_inferred)
        finally:
            if self._workspace_name != old_ws:
                workspace.ResetWorkspace()
                workspace.SwitchWorkspace(old_ws)

    def _check(self, op, inputs, input_to_check, outputs_with_grads, grad_ops, input_device_options,
               ensure_outputs_are_inferred):
        op.device_option.CopyFrom(self._device_option)
        if grad_ops is None:
            grad_ops, g_input = getGradientForOp(op)
        else:
            _, g_input = getGradientForOp(op)
        grad_name = g_input[input_to_check]
        if grad_name is None:
            raise Caffe2Error("%s has no gradient for input %d ('%s')" % (op.type, input_to_check,
                                                                           op.input[input_to_check]))
        device_options = dict(self._input_device_options)
        device_options.update(input_device_options or {})
        # C order: the perturbation loop below writes through x.reshape(-1), which is a
        # copy (so the steps were lost and every estimate 0) for a transposed input
        inputs = [np.array(v, copy=True, order="C") for v in inputs]
        x = inputs[input_to_check]

        self._feed(op, inputs, device_options)
        workspace.RunOperatorOnce(op)
        self._loss(op, outputs_with_grads, feed_grads=True)
        workspace.RunOperatorsOnce(grad_ops)
        if ensure_outputs_are_inferred:
            self._check_inferred(op, grad_ops)
        if isinstance(grad_name, GradientSlice):
            grad = _densify(grad_name, x.shape)
        else:
            grad = np.asarray(workspace.FetchBlob(grad_name))
        if grad.shape != x.shape:
            raise Caffe2Error("Mismatched gradient shapes: estimated (%s), grad (%s)"
                              % (x.shape, grad.shape))

        # the forward once as a net, re-run for every perturbed value
        net = caffe2_pb2.NetDef(name="_gradient_check_forward")
        net.op.add().CopyFrom(op)
        workspace.CreateNet(net, overwrite=True)
        name = op.input[input_to_check]
        option = device_options.get(name, self._device_option)
        # inputs the op overwrites (in place) are fed again before every run, as Caffe2's
        # checker feeds all of them: otherwise the next run reads the last run's output
        overwritten = [(n, v, device_options.get(n, self._device_option)) for n, v in zip(op.input, inputs)
                       if n in op.output and n != name]

        def loss_at(value):
            for other, other_value, other_option in overwritten:
                workspace.FeedBlob(other, other_value, other_option)
            workspace.FeedBlob(name, value, option)
            workspace.RunNet(net.name)
            return self._loss(op, outputs_with_grads, feed_grads=False)

        estimate = np.zeros(x.shape, dtype=np.float64)
        flat = x.reshape(-1)
        for i in range(flat.size):
            original = flat[i]
            flat[i] = original + self._stepsize
            up = loss_at(x)
            flat[i] = original - self._stepsize
            down = loss_at(x)
            flat[i] = original
            estimate.flat[i] = (up - down) / (2 * self._stepsize)
        workspace.FeedBlob(name, x, option)
        estimate = estimate.astype(grad.dtype if grad.dtype.kind == "f" else np.float64)

        fail = ~np.isclose(grad, estimate, atol=self._threshold, rtol=self._threshold)
        if np.any(fail):
            idx = np.flatnonzero(fail)
            print("Failed. [idx, grad, grad_estimate] are:")
            print(np.vstack([idx, grad.flat[idx], estimate.flat[idx]]).T)
            return False, grad, estimate
        return True, grad, estimate

    @staticmethod
    def _check_inferred(op, grad_ops):
        """The gradient ops' outputs as schema inference predicts them (shapes and dtypes)."""
        from .schema_inference import infer_net, type_of_value
        known = {b: type_of_value(workspace.FetchBlob(b)) for b in workspace.Blobs()
                 if isinstance(workspace.FetchBlob(b), np.ndarray)}
        net = caffe2_pb2.NetDef()
        net.op.extend(grad_ops)
        # seed inference with the blobs the gradient ops read before writing them (an
        # in-place op such as Sqr's Scale of dY reads and writes the same blob)
        written, read_first = set(), set()
        for grad_op in grad_ops:
            read_first.update(b for b in grad_op.input if b not in written)
            written.update(grad_op.output)
        inferred = infer_net([net], {b: t for b, t in known.items() if b in read_first or b not in written})
        for grad_op in grad_ops:
            for blob in grad_op.output:
                want = inferred.get(blob)
                got = known.get(blob)
                if want is None or not want.known:
                    raise Caffe2Error("%s: the shape of output '%s' is not inferred" % (grad_op.type, blob))
                if got is not None and (tuple(want.dims) != tuple(got.dims) or want.dtype != got.dtype):
                    raise Caffe2Error("%s: output '%s' inferred as %s (dtype %s) but is %s (dtype %s)"
                                      % (grad_op.type, blob, list(want.dims), want.dtype,
                                         list(got.dims), got.dtype))


def _grad_value(grad_map, blob, shape):
    g = grad_map[blob]
    if isinstance(g, GradientSlice):
        return _densify(g, shape)
    return np.asarray(workspace.FetchBlob(g))


def _net_gradients(net, outputs, outputs_with_grad, input_values, inputs_with_grads):
    grad_net = net.Clone(net.Name() + "_copy")
    grad_map = grad_net.AddGradientOperators(outputs_with_grad)
    for name, value in (input_values or {}).items():
        workspace.FeedBlob(name, value)
    for blob in inputs_with_grads:
        if blob not in grad_map:
            raise Caffe2Error("%s has no gradient, cannot check net gradient." % blob)
    workspace.RunNetOnce(grad_net)
    results = [(o, workspace.FetchBlob(o)) for o in outputs]
    grads = {b: _grad_value(grad_map, b, workspace.FetchBlob(b).shape) for b in inputs_with_grads}
    return results, grads, grad_net


def _assert_close(a, b, threshold, err_msg=""):
    np.testing.assert_allclose(a, b, atol=threshold, rtol=threshold, err_msg=err_msg)
    delta = np.abs(np.asarray(a, np.float64) - b).reshape(-1)
    return (float(np.mean(delta)), float(np.max(delta))) if delta.size else (0.0, 0.0)


class NetGradientChecker:
    """Checks of whole nets built with AddGradientOperators."""

    @staticmethod
    def CompareNets(nets, outputs, outputs_with_grad_ids, inputs_with_grads, input_values=None,
                    threshold=0.0000001, print_net_images=False):  # noqa: ARG004
        results = [_net_gradients(net, outs, [outs[i] for i in outputs_with_grad_ids], input_values,
                                  inputs_with_grads) for net, outs in zip(nets, outputs)]
        first_results, first_grads, _ = results[0]
        for net_results, net_grads, _ in results[1:]:
            for idx, ((b1, v1), (b2, v2)) in enumerate(zip(first_results, net_results)):
                _assert_close(v1, v2, threshold, "Different forward pass results for output id %d. "
                                                 "Corresponding output blobs: %s and %s" % (idx, b1, b2))
            for blob, value in net_grads.items():
                _assert_close(first_grads[blob], value, threshold, "Different gradients for input %s" % blob)

    @staticmethod
    def Check(net, outputs_with_grad, input_values, input_to_check, step_size=0.0001, threshold=0.05,
              print_net=True):
        _, grads, full_net = _net_gradients(net, [], outputs_with_grad, input_values, [input_to_check])
        analytic = grads[input_to_check]

        def loss(value):
            workspace.FeedBlob(input_to_check, value)
            workspace.RunNetOnce(full_net)
            return sum(float(np.sum(np.asarray(workspace.FetchBlob(o), np.float64))) for o in outputs_with_grad)

        base = np.asarray(input_values[input_to_check])
        estimate = np.zeros(base.shape, np.float64)
        for i in range(base.size):
            up, down = base.copy(), base.copy()
            up.flat[i] += step_size
            down.flat[i] -= step_size
            estimate.flat[i] = (loss(up) - loss(down)) / step_size / 2
        workspace.FeedBlob(input_to_check, base)
        message = "Error in gradient check for net_copy %s" % net.Name()
        if print_net:
            message += ": %s" % net.Proto()
        return _assert_close(analytic, estimate, threshold, message)


__all__ = ["GradientChecker", "NetGradientChecker", "getGradientForOp"]
