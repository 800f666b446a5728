"""The numba cache of a kernel is keyed by every CPU kernel module's source, not only
its own: a kernel inlines jitted helpers from other modules, and an edit there must
not reuse machine code compiled against the old helper."""
from kernels.cpu.runtime import cache


def _tree(tmp_path, helper_body):
    (tmp_path / "quant").mkdir(exist_ok=True)
    (tmp_path / "quant" / "conv.py").write_text("from .helper import mul\n")
    (tmp_path / "quant" / "helper.py").write_text(helper_body)
    (tmp_path / "__pycache__").mkdir(exist_ok=True)
    return tmp_path


def test_an_edited_helper_module_moves_every_kernel_to_a_new_cache_folder(tmp_path, monkeypatch):
    root = _tree(tmp_path, "def mul(a, b):\n    return a * b\n")
    monkeypatch.setattr(cache, "_CPU_KERNELS_ROOT", str(root))
    monkeypatch.setattr(cache, "_tree_digest", [])
    conv = str(root / "quant" / "conv.py")
    before = cache.kernel_cache_dir("kernels.cpu.quant.conv", conv)
    assert before == cache.kernel_cache_dir("kernels.cpu.quant.conv", conv)   # stable within a tree

    (root / "quant" / "helper.py").write_text("def mul(a, b):\n    return a * b + 1\n")
    monkeypatch.setattr(cache, "_tree_digest", [])                            # a new process
    after = cache.kernel_cache_dir("kernels.cpu.quant.conv", conv)
    assert after != before and after.startswith(cache.numba_cache_dir())


def test_bytecode_caches_do_not_change_the_key(tmp_path, monkeypatch):
    root = _tree(tmp_path, "X = 1\n")
    monkeypatch.setattr(cache, "_CPU_KERNELS_ROOT", str(root))
    monkeypatch.setattr(cache, "_tree_digest", [])
    first = cache.kernels_tree_digest()
    (root / "__pycache__" / "helper.cpython-311.pyc").write_bytes(b"\0" * 16)
    monkeypatch.setattr(cache, "_tree_digest", [])
    assert cache.kernels_tree_digest() == first
