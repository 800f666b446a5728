"""caffe2py's nomnigraph: the graph IR Caffe2's `caffe2.python.nomnigraph` binds.

Pure Python, one job per module: `graph` (generic directed graph), `representation`
(operator and tensor values, Caffe2 annotations, the data-flow graph), `match` (the
subgraph matcher), `order` (execution order of a module's operators), `converter`
(NetDef <-> NNModule) and the optimisation passes `passes_*` that
caffe2py/transformations.py runs. The public API is caffe2py/nomnigraph.py.
"""
