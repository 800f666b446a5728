"""Developer tools shipped with caffe2py (`python -m caffe2py.tools.fuzz`)."""
