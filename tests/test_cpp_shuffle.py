"""SortAndShuffle without a seed gives Caffe2's own order: its shuffles are libstdc++'s
std::shuffle with a fresh std::default_random_engine. The reference is that very
library: a small C++ program compiled with g++ (skipped where there is none)."""
import shutil
import subprocess

import numpy as np
import pytest

from caffe2py import core, workspace
from caffe2py.kernels.cpu.recsys.cpp_shuffle import MinstdRand0, std_shuffle

_PROGRAM = r"""
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>
int main(int argc, char** argv) {
  for (int a = 1; a < argc; ++a) {
    std::vector<long> v(atol(argv[a]));
    for (size_t i = 0; i < v.size(); ++i) v[i] = i;
    std::shuffle(v.begin(), v.end(), std::default_random_engine());
    for (long x : v) printf("%ld ", x);
    printf("\n");
  }
}
"""


@pytest.fixture(scope="module")
def libstdcxx_shuffle(tmp_path_factory):
    """n -> the permutation std::shuffle(iota(n), std::default_random_engine()) makes."""
    if shutil.which("g++") is None:
        pytest.skip("no g++ to build the libstdc++ reference")
    folder = tmp_path_factory.mktemp("shuffle")
    (folder / "shuffle.cc").write_text(_PROGRAM)
    subprocess.run(["g++", "-O1", "-o", str(folder / "shuffle"), str(folder / "shuffle.cc")], check=True)

    def permutation(*sizes):
        out = subprocess.run([str(folder / "shuffle")] + [str(n) for n in sizes], check=True,
                             capture_output=True, text=True).stdout.splitlines()
        return [np.array(line.split(), dtype=np.int64) for line in out]
    return permutation


def test_minstd_rand0_sequence():
    engine = MinstdRand0()
    # x_{k+1} = 16807 x_k mod (2^31 - 1) from x_0 = 1; the 10000th value is the one the
    # C++ standard names for minstd_rand0
    values = [engine() for _ in range(10000)]
    assert values[:3] == [16807, 16807 ** 2 % (2 ** 31 - 1), 16807 ** 3 % (2 ** 31 - 1)]
    assert values[-1] == 1043618065


def test_std_shuffle_matches_libstdcxx(libstdcxx_shuffle):
    sizes = [1, 2, 3, 4, 7, 10, 64, 1001, 46341, 50000]      # 46341+: one draw per swap
    for n, want in zip(sizes, libstdcxx_shuffle(*sizes)):
        got = np.arange(n, dtype=np.int64)
        std_shuffle(got)
        np.testing.assert_array_equal(got, want, err_msg="n=%d" % n)


def _sort_and_shuffle(keys, **kwargs):
    workspace.ResetWorkspace()
    workspace.RunOperatorOnce(core.CreateOperator("CreateTreeCursor", [], ["cursor"], fields=["key"]))
    workspace.FeedBlob("key", keys)
    workspace.RunOperatorOnce(core.CreateOperator("SortAndShuffle", ["cursor", "key"], ["order"], **kwargs))
    return workspace.FetchBlob("order")


@pytest.mark.parametrize("size, batch, shuffle", [(3, 2, 1), (23, 3, 2), (40, 4, 3), (9, 2, 8), (12, 1, 5)])
def test_sort_and_shuffle_is_caffe2s_order(libstdcxx_shuffle, size, batch, shuffle):
    keys = np.random.default_rng(size).permutation(size).astype(np.int32)
    # Caffe2's steps: sort by key; std::shuffle each chunk of batch * shuffle records that
    # ends before the last record; std::shuffle the batch order; the partial batch last
    if batch * shuffle > size:
        shuffle = size // batch
    chunk = batch * shuffle
    order = np.argsort(keys)
    offset = 0
    while chunk > 1 and offset + chunk < size:
        (perm,) = libstdcxx_shuffle(chunk)
        order[offset:offset + chunk] = order[offset:offset + chunk][perm]
        offset += chunk
    n_batch = size // batch
    (batch_order,) = libstdcxx_shuffle(n_batch)
    want = np.concatenate([order[:n_batch * batch].reshape(n_batch, batch)[batch_order].reshape(-1),
                           order[n_batch * batch:]])
    got = _sort_and_shuffle(keys, sort_by_field_idx=0, batch_size=batch, shuffle_size=shuffle)
    np.testing.assert_array_equal(got, want)


def test_random_reader_keeps_caffe2s_first_method_name():
    from caffe2py import dataset
    reader = dataset._DatasetRandomReader
    assert reader.sortAndShuffle is reader.sort_and_shuffle
