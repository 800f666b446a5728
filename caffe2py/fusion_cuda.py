"""Fused elementwise groups on a CUDA device: the planning, kept outputs, guards and
fallback of caffe2py/fusion.py, with one generated CUDA kernel
(caffe2py/cuda/fused.py) in place of the numba loop.

A group runs fused when every input is a contiguous device array on the group's
device, all of one float dtype (float32 or float16, the dtypes the CUDA elementwise
ops take), the shapes broadcast by each op's own rule, every member's schema guard
passes and the broadcast geometry fits the kernel's 6 dims; otherwise `try_fused`
returns None and the member CUDA ops run one by one, raising their own errors. There
is no size threshold: one launch always beats one launch per op.

A group may end in a last-axis sum or mean (ReduceSum / ReduceMean with axes [-1],
ReduceBack{Sum,Mean} with num_reduce_dim 1; operators/math/cuda_reduce.py is their
unfused CUDA kernel): the generated kernel then runs a block per row and sums the
chain's last value in the unfused kernel's order.
"""
import numpy as np

from . import fusion
from .registry import CUDA


class CudaGroupKernel(fusion._GroupKernel):
    FLOATS = (np.float32, np.float16)
    min_elements = 1
    fuses_reductions = True     # a last-axis sum / mean ends a chain (cuda/fused.py's row kernel)

    def __init__(self, members, rules, inputs, outputs, make_error):
        super().__init__(members, rules, inputs, outputs, make_error)
        self.device_id = members[0].op_def.device_option.device_id

    def _value_ok(self, v):
        from .cuda import adapter  # noqa: PLC0415
        return (adapter.is_device_array(v) and adapter.device_id_of(v) == self.device_id
                and v.flags.c_contiguous)

    def _program(self, dtype, uses):
        from .cuda.fused import CudaFusedProgram, literal  # noqa: PLC0415
        key = (dtype.name, tuple((n, i) for n, i, _ in uses))
        program = self.programs.get(key)
        if program is not None:
            return program
        names = {}
        for n, i, _ in uses:
            names[(n, i)] = "x%d" % len(names)
        body, reduced = [], None
        for n, (rule, sources) in enumerate(zip(self.rules, self.sources)):
            args = [names[(n, i)] if kind == "in" else "t%d" % i for kind, i in sources]
            if rule.reduce is not None:       # the group's last op: the kernel sums its input per row
                reduced = args[0]
                continue
            body += rule.cuda(args, self.out_locals(n), lambda v: literal(v, dtype))
            body += ["t%d = c2f_round(t%d);" % (v, v) for v in self.member_values[n]]
        rule_of = [self.rules[n] for n in self.value_member]
        outputs = ["t%d" % i for _, i in self.result_of if rule_of[i].reduce is None]
        locals_ = ["t%d" % v for v, rule in enumerate(rule_of) if rule.reduce is None]
        program = self.programs[key] = CudaFusedProgram(dtype, len(uses), body, outputs, locals_, reduced)
        return program

    def _device_outputs(self, shapes, dtype):
        from .cuda import adapter, allocator  # noqa: PLC0415
        return [adapter.tag(allocator.empty(shape, dtype, self.device_id), self.device_id) for shape in shapes]

    def try_fused(self, *values):
        if self.broken:
            return None
        planned = self._plan_shapes(values)
        if planned is None or not self._guards_pass(values, planned[0], planned[2]):
            fusion.stats["fallback_runs"] += 1
            return None
        dtype, shape, node_shapes, uses = planned
        views = [(1,) * (len(shape) - len(v)) + v for _, _, v in uses]
        from .cuda import launch  # noqa: PLC0415
        try:
            launch.broadcast_strides(shape, *views)
        except ValueError:          # more than 6 dims after merging: the ops handle it
            fusion.stats["fallback_runs"] += 1
            return None
        last = self.member_values[-1][0]      # the last member's (first) value
        reduction = self.rules[-1].reduce
        if reduction is not None and ("node", last) not in self.result_of:
            fusion.stats["fallback_runs"] += 1     # nobody reads the sum: not worth a kernel
            return None
        program = self._program(dtype, uses)
        # the kernel's outputs: per-element values, then (a reduction) the row sums
        order = [k for k, (_, i) in enumerate(self.result_of) if i != last or reduction is None]
        order += [k for k, (_, i) in enumerate(self.result_of) if i == last and reduction is not None]
        outs = self._device_outputs([node_shapes[self.result_of[k][1]] for k in order], dtype)
        try:
            program.function(self.device_id)
        except MemoryError:
            raise
        except Exception:  # noqa: BLE001 - the kernel would not build: never try again
            self.broken = True
            fusion.stats["fallback_runs"] += 1
            return None
        divisor = float(shape[-1]) if reduction == "mean" else 1.0
        program.run([values[i] for _, i, _ in uses], views, shape, outs, self.device_id, divisor)
        fusion.stats["fused_runs"] += 1
        fusion.stats["cuda_fused_runs"] += 1
        results = [None] * len(outs)
        for k, out in zip(order, outs):
            results[k] = out
        return tuple(results)


fusion.GROUP_KERNELS[CUDA] = CudaGroupKernel
