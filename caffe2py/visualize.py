"""caffe2.python.visualize: show tensors as images (filters, feature maps, patches).

    from caffe2py import visualize
    visualize.NCHW.ShowMultiple(workspace.FetchBlob("conv1_w"))   # one tile per filter

PatchVisualizer lays patches out on a grid (gap pixels apart, the background the
patches' mean) and shows the mosaic with matplotlib; its methods return the image
they show. Patches are (h, w) gray, (h, w, 1) gray or (h, w, 3) color, or
flattened rows whose square shape is inferred. NHWC / NCHW show channel-last /
channel-first tensors through a shared default visualizer.

matplotlib is needed only to show: without it the show functions raise
MatplotlibMissingError; PatchVisualizer.Compose* build the same images without it.
"""
import numpy as np

from .errors import Caffe2Error


class MatplotlibMissingError(Caffe2Error):
    """Showing images needs matplotlib, which is not installed."""


def _pyplot():
    try:
        from matplotlib import pyplot  # noqa: PLC0415 - optional, only to show
    except ImportError as error:
        raise MatplotlibMissingError("caffe2py.visualize needs matplotlib to show images (pip install "
                                     "caffe2py[visualize]); PatchVisualizer.Compose* build the images "
                                     "without it: %s" % error) from None
    return pyplot


def _gray_colormap():
    from matplotlib import cm  # noqa: PLC0415 - optional, only to show
    return cm.gray


def ChannelFirst(arr):
    """HWC (or ...HWC) -> CHW (...CHW)."""
    return np.moveaxis(arr, -1, -3)


def ChannelLast(arr):
    """CHW (or ...CHW) -> HWC (...HWC)."""
    return np.moveaxis(arr, -3, -1)


class PatchVisualizer:

    def __init__(self, gap=1):
        self.gap = gap

    @staticmethod
    def get_patch_shape(patch):
        """The shape of a flattened patch: a square, gray or (when the size is three
        squares) color."""
        side = int(round(np.sqrt(patch.size)))
        if side * side == patch.size:
            return (side, side)
        side = int(round(np.sqrt(patch.size / 3.0)))
        if 3 * side * side == patch.size:
            return (side, side, 3)
        raise ValueError("cannot infer the shape of a patch of %d values (not a square, nor 3 squares)" % patch.size)

    def ComposeSingle(self, patch):
        """The image of one patch (a flattened patch takes its inferred shape)."""
        patch = np.asarray(patch)
        if patch.ndim == 1:
            patch = patch.reshape(self.get_patch_shape(patch))
        elif patch.ndim > 2 and patch.shape[2] != 3:
            raise ValueError("a patch is (h, w) or (h, w, 3); got shape %s" % (patch.shape,))
        return patch

    def ComposeMultiple(self, patches, ncols=None, bg_func=np.mean):
        """The grid image of patches (one per row of `patches`), ncols wide (about
        square by default), the gaps filled with bg_func(patches)."""
        patches = np.asarray(patches)
        count = patches.shape[0]
        if count == 0:
            raise ValueError("no patches to show")
        ncols = ncols or int(np.ceil(np.sqrt(count)))
        nrows = int(np.ceil(count / float(ncols)))
        if patches.ndim == 2:
            patches = patches.reshape((count,) + self.get_patch_shape(patches[0]))
        if patches.ndim == 4:
            if patches.shape[3] == 1:
                patches = patches.reshape(patches.shape[:-1])
            elif patches.shape[3] != 3:
                raise ValueError("patches are gray (h, w[, 1]) or color (h, w, 3); got shape %s" % (
                    patches.shape[1:],))
        elif patches.ndim != 3:
            raise ValueError("patches must be 2-D (flattened), 3-D or 4-D; got shape %s" % (patches.shape,))
        step = np.array(patches.shape[1:3]) + self.gap
        size = step * np.array([nrows, ncols]) - self.gap
        image = np.full(tuple(size) + patches.shape[3:], bg_func(patches), dtype=np.float64)
        for index in range(count):
            top, left = index // ncols * step[0], index % ncols * step[1]
            image[top:top + patches.shape[1], left:left + patches.shape[2]] = patches[index]
        return image

    @staticmethod
    def NormalizeImages(patches):
        """patches scaled into [0, 1]."""
        patches = np.asarray(patches, dtype=np.float64)
        patches = patches - patches.min()
        return patches / (patches.max() + np.finfo(np.float64).eps)

    @staticmethod
    def ChannelPatches(patch):
        """A (h, w, channels) patch as `channels` gray (h, w) patches."""
        patch = np.asarray(patch)
        if patch.ndim != 3:
            raise ValueError("ShowChannels takes a (h, w, channels) patch; got shape %s" % (patch.shape,))
        return np.moveaxis(patch, -1, 0)

    def ShowSingle(self, patch, cmap=None):
        pyplot = _pyplot()
        patch = self.ComposeSingle(patch)
        if patch.ndim == 2 and cmap is None:
            cmap = _gray_colormap()
        pyplot.imshow(patch, cmap=cmap)
        return patch

    def ShowMultiple(self, patches, ncols=None, cmap=None, bg_func=np.mean):
        pyplot = _pyplot()
        image = self.ComposeMultiple(patches, ncols=ncols, bg_func=bg_func)
        pyplot.imshow(image, cmap=cmap, interpolation="nearest")
        pyplot.axis("off")
        return image

    def ShowImages(self, patches, *args, **kwargs):
        """ShowMultiple of the patches scaled into [0, 1] (for image data)."""
        return self.ShowMultiple(self.NormalizeImages(patches), *args, **kwargs)

    def ShowChannels(self, patch, cmap=None, bg_func=np.mean):
        """Each channel of a (h, w, channels) patch as its own gray tile."""
        return self.ShowMultiple(self.ChannelPatches(patch), cmap=cmap, bg_func=bg_func)


_default_visualizer = PatchVisualizer()


class NHWC:
    """The default visualizer on channel-last tensors (returns nothing, so notebooks
    do not print the image arrays)."""

    @staticmethod
    def ShowSingle(*args, **kwargs):
        _default_visualizer.ShowSingle(*args, **kwargs)

    @staticmethod
    def ShowMultiple(*args, **kwargs):
        _default_visualizer.ShowMultiple(*args, **kwargs)

    @staticmethod
    def ShowImages(*args, **kwargs):
        _default_visualizer.ShowImages(*args, **kwargs)

    @staticmethod
    def ShowChannels(*args, **kwargs):
        _default_visualizer.ShowChannels(*args, **kwargs)


class NCHW:
    """The default visualizer on channel-first tensors."""

    @staticmethod
    def ShowSingle(patch, *args, **kwargs):
        _default_visualizer.ShowSingle(ChannelLast(patch), *args, **kwargs)

    @staticmethod
    def ShowMultiple(patch, *args, **kwargs):
        _default_visualizer.ShowMultiple(ChannelLast(patch), *args, **kwargs)

    @staticmethod
    def ShowImages(patch, *args, **kwargs):
        _default_visualizer.ShowImages(ChannelLast(patch), *args, **kwargs)

    @staticmethod
    def ShowChannels(patch, *args, **kwargs):
        _default_visualizer.ShowChannels(ChannelLast(patch), *args, **kwargs)
