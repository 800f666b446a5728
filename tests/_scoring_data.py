"""Datasets and references for the scoring tests: the demo net run directly on a
workspace (no scoring code), shards written with pyarrow/NumPy in each format."""
import os

import numpy as np

ROW_SHAPE = (1, 28, 28)


def demo_reference(images):
    """The demo net's softmax for images [N, 1, 28, 28], run on a plain Workspace."""
    from caffe2py.demo import build_demo
    from caffe2py.workspace import Workspace
    init_net, predict_net, _ = build_demo()
    ws = Workspace("scoring_reference")
    ws.run_net_once(init_net)
    ws.feed_blob("data", np.ascontiguousarray(images, dtype=np.float32))
    ws.run_net_once(predict_net)
    return ws.fetch_blob("softmax")


def images(rows, seed):
    return np.random.default_rng(seed).random((rows,) + ROW_SHAPE, dtype=np.float32)


def write_parquet(path, ids, data, form="flat", metadata=None):
    """data [N, 1, 28, 28] as a column of the given form: flat (784-value fixed
    list), nested (fixed lists [1][28][28]), list (variable lists of 784),
    npy (binary .npy bytes per row), raw (binary raw float32 bytes + metadata)."""
    import io
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq
    n = len(data)
    flat = data.reshape(n, -1)
    field_meta = metadata
    if form == "flat":
        col = pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1)), flat.shape[1])
    elif form == "nested":
        col = pa.array(data.reshape(-1))
        for size in reversed(data.shape[1:]):
            col = pa.FixedSizeListArray.from_arrays(col, size)
    elif form == "list":
        col = pa.array(list(flat), type=pa.list_(pa.float32()))
    elif form == "npy":
        rows = []
        for row in data:
            buf = io.BytesIO()
            np.save(buf, row)
            rows.append(buf.getvalue())
        col = pa.array(rows, type=pa.binary())
    elif form == "raw":
        col = pa.array([row.tobytes() for row in data], type=pa.binary())
        field_meta = {b"dtype": b"float32", b"shape": json.dumps(list(data.shape[1:])).encode()}
    else:
        raise ValueError(form)
    fields = [pa.field("data", col.type, metadata=field_meta)]
    arrays = [col]
    if ids is not None:
        ids = pa.array(ids)
        fields.insert(0, pa.field("id", ids.type))
        arrays.insert(0, ids)
    pq.write_table(pa.Table.from_arrays(arrays, schema=pa.schema(fields)), path)
    return path


def demo_dataset(folder, shards=3, rows=20, seed=0):
    """Parquet shards part-0..; returns {shard file name: (ids, images)}."""
    os.makedirs(folder, exist_ok=True)
    made = {}
    for k in range(shards):
        data = images(rows, seed + k)
        ids = np.arange(rows, dtype=np.int64) * 7 + 1000 * k
        name = "part-%d.parquet" % k
        write_parquet(os.path.join(folder, name), ids, data)
        made[name] = (ids, data)
    return made


def read_output(path, column="softmax"):
    """(ids as a list, outputs as an array) of one output file."""
    import pyarrow.parquet as pq
    table = pq.read_table(path)
    values = table.column(column).combine_chunks()
    shape = []
    import pyarrow as pa
    while pa.types.is_fixed_size_list(values.type):
        shape.append(values.type.list_size)
        values = values.flatten()
    out = values.to_numpy(zero_copy_only=False).reshape([table.num_rows] + shape)
    return table.column("id").to_pylist(), out
