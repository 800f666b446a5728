"""Gradient makers for operator modules that must also load where caffe2py has no
gradient registry yet (caffe2py.gradients). With the registry these are its own
functions; without it they accept the same calls and register nothing, so an
operator module defines its makers once and they become active when the registry
is present."""
try:
    from caffe2py.gradients import no_gradient, register_gradient, should_not_do_gradient
    HAVE_GRADIENTS = True
except ImportError:          # a build without the gradient registry: forward ops only
    HAVE_GRADIENTS = False

    def register_gradient(*op_types, **options):
        return lambda maker: maker

    def no_gradient(*op_types):
        return None

    def should_not_do_gradient(*op_types):
        return None



def delegate_gradient(alias, op_type, rename=()):
    """Give `alias` (another name of op_type) op_type's gradient, looked up when the
    gradient is built, so op_type's maker may be registered later. rename maps
    gradient op types to the alias's own (Conv2D's ConvGradient is Conv2DGradient in
    Caffe2)."""
    renames = dict(rename)

    @register_gradient(alias, copy_arguments=False, copy_device_option=False, copy_engine=False)
    def _maker(g):
        from caffe2py.gradients import get_gradient_for_op
        twin = type(g.def_)()
        twin.CopyFrom(g.def_)
        twin.type = op_type
        ops, g_input = get_gradient_for_op(twin, g.g_output)
        for i, gradient in enumerate(g_input):
            g.g_input[i] = gradient
        for op in ops:
            op.type = renames.get(op.type, op.type)
        return ops
    return _maker


__all__ = ["HAVE_GRADIENTS", "delegate_gradient", "no_gradient", "register_gradient", "should_not_do_gradient"]
