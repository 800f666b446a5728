"""The optional packages scoring needs, each with an error that says how to get it."""
from caffe2py.errors import Caffe2Error


class MissingDependency(Caffe2Error):
    """An optional package is not installed; the message names the extra that brings it."""


def require_pyarrow():
    """pyarrow (with its Parquet module), or a MissingDependency naming the extra."""
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise MissingDependency("scoring reads and writes Parquet with pyarrow, which is not installed: "
                                "pip install 'caffe2py[score]' (or pip install pyarrow)") from None
    return pyarrow


def require_ray():
    """ray with Ray Data, or a MissingDependency naming the extra."""
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError:
        raise MissingDependency("--ray runs the job on Ray Data, which is not installed: "
                                "pip install 'caffe2py[ray]' (or pip install 'ray[data]' pyarrow)") from None
    require_pyarrow()
    return ray
