"""What the passes read from an operator node's OperatorDef: conv geometry and flags."""
from ..args import ArgumentHelper
from .representation import operator_def_of


def op_args(node):
    return ArgumentHelper(operator_def_of(node))


def kernel_shape(args):
    """The kernel's spatial sizes from kernel / kernels / kernel_h+kernel_w ([] if none)."""
    if args.has("kernel"):
        return [args.get_int("kernel")] * 2
    if args.has("kernels"):
        return list(args.get_ints("kernels"))
    if args.has("kernel_h") and args.has("kernel_w"):
        return [args.get_int("kernel_h"), args.get_int("kernel_w")]
    return []


def strides(args):
    """Every stride the op states (stride, strides, stride_h, stride_w)."""
    found = []
    if args.has("stride"):
        found.append(args.get_int("stride"))
    if args.has("strides"):
        found.extend(args.get_ints("strides"))
    found.extend(args.get_int(name) for name in ("stride_h", "stride_w") if args.has(name))
    return found


def order(args):
    """"NCHW", "NHWC" or None when `order` is absent."""
    if not args.has("order"):
        return None
    return args.get_string("order").upper()
