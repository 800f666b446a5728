"""`caffe2py cache`: where compiled kernels are kept, how big the cache is, clearing it."""
from caffe2py.kernels.cpu.runtime import cache

NAME = "cache"
HELP = "show or clear the compiled-kernel cache (kept in a user cache folder, shared by installs)"


def add_arguments(parser):
    parser.add_argument("action", nargs="?", choices=("info", "clear"), default="info",
                        help="info (default): location and size; clear: delete it (kernels compile again)")


def run(args):
    if args.action == "clear":
        freed = cache.clear()
        print("cleared %s (%.1f MB)" % (cache.cache_root(), freed / 1e6))
        return 0
    root, size, files, folders = cache.summary()
    print("cache folder: %s (set CAFFE2PY_CACHE to move it)" % root)
    print("size: %.1f MB in %d files; compiled kernel modules: %d" % (size / 1e6, files, len(folders)))
    for name in folders:
        print("  " + name)
    return 0
