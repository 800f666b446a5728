"""Caffe2's DeviceChecker (caffe2.python.device_checker): run one op or net on
several devices and check that they compute the same outputs."""
import copy

import numpy as np

from . import workspace

_CHECK_WORKSPACE = "_device_check_"


def _feed(names, values, device_option, input_device_options):
    for name, value in zip(names, values):
        workspace.FeedBlob(name, value, device_option=input_device_options.get(name, device_option))


class DeviceChecker:
    """DeviceChecker(threshold, device_options): outputs on every device must match
    those of device_options[0] within `threshold` (absolute and relative)."""

    def __init__(self, threshold, device_options):
        self._threshold = threshold
        self._device_options = list(device_options)

    def _close(self, name, got, want, device_option):
        got, want = np.asarray(got), np.asarray(want)
        if got.shape != want.shape:
            print("DeviceChecker: %s has shape %s on %s but %s on %s"
                  % (name, got.shape, device_option, want.shape, self._device_options[0]))
            return False
        if got.dtype.kind in "OSU" or want.dtype.kind in "OSU":
            same = np.array_equal(got, want)
        else:
            same = np.allclose(got, want, atol=self._threshold, rtol=self._threshold, equal_nan=True)
        if not same:
            print("DeviceChecker: %s differs on %s from %s:\n%s\nvs\n%s"
                  % (name, device_option, self._device_options[0], got.ravel(), want.ravel()))
        return same

    def CheckSimple(self, op, inputs, outputs_to_check, input_device_options=None):
        """Run `op` on each device with `inputs` fed to its inputs; compare the outputs
        whose indices are in `outputs_to_check`. Returns True when all agree."""
        if isinstance(outputs_to_check, int):
            outputs_to_check = [outputs_to_check]
        input_device_options = input_device_options or {}
        before = workspace.CurrentWorkspace()
        results, ok = [], True
        try:
            for device_option in self._device_options:
                workspace.SwitchWorkspace(_CHECK_WORKSPACE, True)
                workspace.ResetWorkspace()
                op_here = copy.deepcopy(op)
                op_here.device_option.CopyFrom(device_option)
                _feed(op_here.input, inputs, device_option, input_device_options)
                workspace.RunOperatorOnce(op_here)
                results.append([workspace.FetchBlob(op_here.output[i]) for i in outputs_to_check])
            for device_option, outs in zip(self._device_options[1:], results[1:]):
                for i, got, want in zip(outputs_to_check, outs, results[0]):
                    ok = self._close(op.output[i], got, want, device_option) and ok
        finally:
            workspace.ResetWorkspace()
            workspace.SwitchWorkspace(before)
        return ok

    def CheckNet(self, net, inputs=None, blobs_to_check=None, ignore=None):
        """Run `net` (a NetDef or core.Net) on each device, its inputs fed from the
        `inputs` dict; compare `blobs_to_check` (default: every blob the net writes
        that is not in `ignore`). Returns True when all agree."""
        net_def = net.Proto() if hasattr(net, "Proto") else net
        inputs = inputs or {}
        ignore = set(ignore or ())
        if blobs_to_check is None:
            blobs_to_check = sorted({b for op in net_def.op for b in op.output} - ignore)
        before = workspace.CurrentWorkspace()
        results, ok = [], True
        try:
            for device_option in self._device_options:
                workspace.SwitchWorkspace(_CHECK_WORKSPACE, True)
                workspace.ResetWorkspace()
                on_device = copy.deepcopy(net_def)
                on_device.device_option.CopyFrom(device_option)
                for op in on_device.op:
                    op.device_option.CopyFrom(device_option)
                for name, value in inputs.items():
                    workspace.FeedBlob(name, value, device_option=device_option)
                workspace.RunNetOnce(on_device)
                results.append([workspace.FetchBlob(b) for b in blobs_to_check])
            for device_option, outs in zip(self._device_options[1:], results[1:]):
                for name, got, want in zip(blobs_to_check, outs, results[0]):
                    ok = self._close(name, got, want, device_option) and ok
        finally:
            workspace.ResetWorkspace()
            workspace.SwitchWorkspace(before)
        return ok

