def compile(source, nvcc="nvcc", options=None, keep=False, no_extern_c=False, arch=None, code=None,
            cache_dir=None, include_dirs=(), target="cubin"):
    assert arch and arch.startswith("sm_") and no_extern_c and cache_dir is False
    return b"fake cubin for " + arch.encode()
