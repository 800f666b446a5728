"""A fuzz case: an id that regenerates it (family, campaign seed, index) and the
data its family's runner needs. Generation never runs an op, so the parent
process can rebuild any case to write its reproducer."""
from dataclasses import dataclass, field


@dataclass
class Case:
    case_id: str
    family: str
    data: dict = field(default_factory=dict)
    summary: str = ""

    def files(self):
        """{file name: bytes} that reproduce the case without the generator."""
        import io

        import json

        import numpy as np
        out = {}
        plain = {k: v for k, v in self.data.items() if isinstance(v, (str, int, float, bool, type(None)))}
        plain.update({k: _to_json(v) for k, v in self.data.items() if isinstance(v, (list, tuple))})
        out["case.json"] = json.dumps({"case_id": self.case_id, "family": self.family, "summary": self.summary,
                                       "data": plain}, indent=1).encode()
        for key, value in self.data.items():
            if isinstance(value, (bytes, bytearray)):
                out[key + (".onnx" if "onnx" in key else ".pb")] = bytes(value)
            elif isinstance(value, dict) and all(isinstance(v, np.ndarray) for v in value.values()):
                buf = io.BytesIO()
                np.savez(buf, **{k.replace("/", "_"): v for k, v in value.items()}, allow_pickle=True)
                out[key + ".npz"] = buf.getvalue()
        return out


def _to_json(value):
    """Lists of steps (the api family's) as JSON: bytes as {"bytes": hex}, tuples as lists."""
    if isinstance(value, (bytes, bytearray)):
        return {"bytes": bytes(value).hex()}
    if isinstance(value, (list, tuple)):
        return [_to_json(v) for v in value]
    if hasattr(value, "item"):                  # NumPy scalars
        return value.item()
    return value


def _from_json(value):
    if isinstance(value, dict) and set(value) == {"bytes"}:
        return bytes.fromhex(value["bytes"])
    if isinstance(value, list):
        return tuple(_from_json(v) for v in value)
    return value


def parse_id(case_id):
    family, seed, index = case_id.rsplit(":", 2)
    return family, int(seed), int(index)


def case_rng(family, seed, index):
    import zlib

    import numpy as np
    return np.random.default_rng([zlib.crc32(family.encode()), seed & 0xFFFFFFFF, index])


def case_from_folder(folder):
    """The Case a reproducer folder holds (written by Case.files), without the generator:
    it replays even after the code that drew it has changed."""
    import json
    import os

    import numpy as np
    with open(os.path.join(folder, "case.json")) as f:
        meta = json.load(f)
    data = {k: list(_from_json(v)) if isinstance(v, list) else v for k, v in meta["data"].items()}
    for name in sorted(os.listdir(folder)):
        key, ext = os.path.splitext(name)
        path = os.path.join(folder, name)
        if ext in (".pb", ".onnx"):
            with open(path, "rb") as f:
                data[key] = f.read()
        elif ext == ".npz":
            with np.load(path, allow_pickle=True) as z:
                data[key] = {k: z[k] for k in z.files}
    if meta["family"] == "op":
        data.setdefault("inputs", {})            # folders of cases without inputs (written before they had one)
    if "predict_net" in data:
        data.setdefault("init_net", None)       # a net pair without an init net
    return Case(meta["case_id"], meta["family"], data, meta["summary"])
