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

__all__ = ["HAVE_GRADIENTS", "no_gradient", "register_gradient", "should_not_do_gradient"]
