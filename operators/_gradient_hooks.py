"""Gradient registration helpers for the caffe2-domain operator modules: the
registry's own functions, and delegate_gradient for ops that are another name of an
op (Conv2D of Conv, DepthConcat of Concat) whose maker may load later."""
from caffe2py.definition_sites import caller_site
from caffe2py.gradients import (get_gradient_for_op, no_gradient, record_gradient_site, register_gradient,
                                should_not_do_gradient)


def delegate_gradient(alias, op_type, rename=()):
    """Give `alias` (another name of op_type) op_type's gradient, looked up when the
    gradient is built, so op_type's maker may be registered later. rename maps
    gradient op types to the alias's own (Conv2D's ConvGradient is Conv2DGradient in
    Caffe2)."""
    renames = dict(rename)

    @register_gradient(alias, copy_arguments=False, copy_device_option=False, copy_engine=False)
    def _maker(g):
        twin = type(g.def_)()
        twin.CopyFrom(g.def_)
        twin.type = op_type
        ops, g_input = get_gradient_for_op(twin, g.g_output)
        for i, gradient in enumerate(g_input):
            g.g_input[i] = gradient
        for op in ops:
            op.type = renames.get(op.type, op.type)
        return ops
    record_gradient_site(alias, caller_site())
    return _maker


__all__ = ["delegate_gradient", "no_gradient", "register_gradient", "should_not_do_gradient"]
