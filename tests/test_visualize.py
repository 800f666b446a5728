"""caffe2py.visualize: the patch mosaics against NumPy layouts written here, channel
order conversions, and the named error when matplotlib is missing (or the image
matplotlib is handed when it is there)."""
import builtins
import sys

import numpy as np
import pytest

from caffe2py import visualize


def test_channel_first_and_last_are_inverse_transposes():
    hwc = np.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5)
    np.testing.assert_array_equal(visualize.ChannelFirst(hwc), hwc.transpose(0, 3, 1, 2))
    np.testing.assert_array_equal(visualize.ChannelLast(visualize.ChannelFirst(hwc)), hwc)


def test_flattened_patch_shapes_are_inferred():
    vis = visualize.PatchVisualizer()
    assert vis.get_patch_shape(np.zeros(16)) == (4, 4)
    assert vis.get_patch_shape(np.zeros(27)) == (3, 3, 3)
    with pytest.raises(ValueError, match="cannot infer"):
        vis.get_patch_shape(np.zeros(10))
    np.testing.assert_array_equal(vis.ComposeSingle(np.arange(9)), np.arange(9).reshape(3, 3))


def test_gray_patches_tile_row_by_row_with_gaps_of_the_mean():
    patches = np.arange(5 * 2 * 2, dtype=np.float64).reshape(5, 2, 2)
    image = visualize.PatchVisualizer(gap=1).ComposeMultiple(patches)      # 3 columns, 2 rows
    assert image.shape == (2 * 3 - 1, 3 * 3 - 1)
    expected = np.full((5, 8), patches.mean())
    for index in range(5):
        row, col = divmod(index, 3)
        expected[3 * row:3 * row + 2, 3 * col:3 * col + 2] = patches[index]
    np.testing.assert_array_equal(image, expected)


def test_color_and_single_channel_patches():
    vis = visualize.PatchVisualizer(gap=0)
    color = np.random.RandomState(0).rand(4, 2, 2, 3)
    image = vis.ComposeMultiple(color, ncols=4, bg_func=np.min)
    np.testing.assert_array_equal(image, np.concatenate(list(color), axis=1))
    gray = vis.ComposeMultiple(color[..., :1], ncols=2)
    np.testing.assert_array_equal(gray[:2, 2:], color[1, :, :, 0])
    with pytest.raises(ValueError, match="gray"):
        vis.ComposeMultiple(np.zeros((2, 3, 3, 2)))


def test_channels_become_tiles_and_images_are_normalized():
    patch = np.random.RandomState(1).rand(3, 3, 4)
    tiles = visualize.PatchVisualizer.ChannelPatches(patch)
    np.testing.assert_array_equal(tiles[2], patch[:, :, 2])
    scaled = visualize.PatchVisualizer.NormalizeImages(np.array([2.0, 4.0, 6.0]))
    np.testing.assert_allclose(scaled, [0.0, 0.5, 1.0])


def test_showing_without_matplotlib_raises_a_named_error(monkeypatch):
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    for name in list(sys.modules):
        if name.startswith("matplotlib"):
            monkeypatch.delitem(sys.modules, name)
    with pytest.raises(visualize.MatplotlibMissingError, match="needs matplotlib"):
        visualize.NCHW.ShowMultiple(np.zeros((2, 1, 3, 3)))


def test_show_multiple_hands_the_mosaic_to_pyplot():
    pytest.importorskip("matplotlib")
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot
    pyplot.figure()
    patches = np.random.RandomState(2).rand(4, 3, 3)
    image = visualize.PatchVisualizer().ShowMultiple(patches)
    np.testing.assert_array_equal(pyplot.gca().get_images()[0].get_array(), image)
    pyplot.close("all")
