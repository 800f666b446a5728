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

        import numpy as np
        out = {}
        for key, value in self.data.items():
            if isinstance(value, (bytes, bytearray)):
                out[key + (".onnx" if "onnx" in key else ".pb")] = bytes(value)
            elif isinstance(value, dict) and value and all(isinstance(v, np.ndarray) for v in value.values()):
                buf = io.BytesIO()
                np.savez(buf, **{k.replace("/", "_"): v for k, v in value.items()}, allow_pickle=True)
                out[key + ".npz"] = buf.getvalue()
        return out


def parse_id(case_id):
    family, seed, index = case_id.rsplit(":", 2)
    return family, int(seed), int(index)


def case_rng(family, seed, index):
    import zlib

    import numpy as np
    return np.random.default_rng([zlib.crc32(family.encode()), seed & 0xFFFFFFFF, index])
