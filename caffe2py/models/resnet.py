"""caffe2.python.models.resnet: ResNets built with brew, with Caffe2's function names,
arguments and blob names (so trainers, checkpoints and predictors that name
`conv1`, `comp_3_sum_2`, `final_avg` or `last_out_L1000` find them).

- create_resnet50: ResNet-50 for ImageNet (He et al. 2015, table 1): a 7x7 stride-2
  conv, 3x3 stride-2 max pool, bottleneck stages of 3, 4, 6 and 3 blocks (64, 128,
  256, 512 base filters; stride 2 in the first 3x3 conv of stages 3-5), average pool
  and FC. final_avg_kernel 7 fits 224 x 224 inputs (input / 32).
- create_resnet_32x32: the CIFAR ResNet of section 4.2 (6 * num_groups + 2 layers).
- ResNetBuilder: the blocks, for custom depths.
"""
from .. import brew

_MSRA = ("MSRAFill", {})


class ResNetBuilder:
    """Adds ResNet blocks after `prev_blob`. Blocks are numbered (comp_count) and the
    layers inside a block too (comp_idx): comp_<block>_conv_<i>, comp_<block>_spatbn_<i>,
    comp_<block>_sum_<i>, shortcut_projection_<block>."""

    def __init__(self, model, prev_blob, no_bias, is_test, spatial_bn_mom=0.9):
        self.model = model
        self.comp_count = 0
        self.comp_idx = 0
        self.prev_blob = prev_blob
        self.is_test = is_test
        self.spatial_bn_mom = spatial_bn_mom
        self.no_bias = 1 if no_bias else 0

    def add_conv(self, in_filters, out_filters, kernel, stride=1, pad=0):
        self.comp_idx += 1
        self.prev_blob = brew.conv(self.model, self.prev_blob, "comp_%d_conv_%d" % (self.comp_count, self.comp_idx),
                                   in_filters, out_filters, weight_init=_MSRA, kernel=kernel, stride=stride, pad=pad,
                                   no_bias=self.no_bias)
        return self.prev_blob

    def add_relu(self):
        self.prev_blob = brew.relu(self.model, self.prev_blob, self.prev_blob)      # in place
        return self.prev_blob

    def add_spatial_bn(self, num_filters):
        self.prev_blob = brew.spatial_bn(self.model, self.prev_blob,
                                         "comp_%d_spatbn_%d" % (self.comp_count, self.comp_idx), num_filters,
                                         epsilon=1e-3, momentum=self.spatial_bn_mom, is_test=self.is_test)
        return self.prev_blob

    def _shortcut(self, blob, in_filters, out_filters, stride, spatial_batch_norm):
        """The block's input, projected by a 1x1 conv when the width changes."""
        if out_filters == in_filters:
            return blob
        blob = brew.conv(self.model, blob, "shortcut_projection_%d" % self.comp_count, in_filters, out_filters,
                         weight_init=_MSRA, kernel=1, stride=stride, no_bias=self.no_bias)
        if spatial_batch_norm:
            blob = brew.spatial_bn(self.model, blob, "shortcut_projection_%d_spatbn" % self.comp_count, out_filters,
                                   epsilon=1e-3, momentum=self.spatial_bn_mom, is_test=self.is_test)
        return blob

    def _finish_block(self, shortcut):
        self.prev_blob = brew.sum(self.model, [shortcut, self.prev_blob],
                                  "comp_%d_sum_%d" % (self.comp_count, self.comp_idx))
        self.comp_idx += 1
        self.add_relu()
        self.comp_count += 1
        return self.prev_blob

    def add_bottleneck(self, input_filters, base_filters, output_filters, down_sampling=False,
                       spatial_batch_norm=True):
        """1x1 (base) -> 3x3 (base, stride 2 when down_sampling) -> 1x1 (output), plus the
        shortcut; BN after each conv, ReLU after the first two and after the sum."""
        self.comp_idx = 0
        block_input = self.prev_blob
        stride = 2 if down_sampling else 1
        for in_f, out_f, kernel, s, pad in ((input_filters, base_filters, 1, 1, 0),
                                            (base_filters, base_filters, 3, stride, 1)):
            self.add_conv(in_f, out_f, kernel=kernel, stride=s, pad=pad)
            if spatial_batch_norm:
                self.add_spatial_bn(out_f)
            self.add_relu()
        self.add_conv(base_filters, output_filters, kernel=1)
        if spatial_batch_norm:
            self.add_spatial_bn(output_filters)
        shortcut = self._shortcut(block_input, input_filters, output_filters, stride, spatial_batch_norm)
        return self._finish_block(shortcut)

    def add_simple_block(self, input_filters, num_filters, down_sampling=False, spatial_batch_norm=True):
        """3x3 (stride 2 when down_sampling) -> 3x3, plus the shortcut."""
        self.comp_idx = 0
        block_input = self.prev_blob
        stride = 2 if down_sampling else 1
        self.add_conv(input_filters, num_filters, kernel=3, stride=stride, pad=1)
        if spatial_batch_norm:
            self.add_spatial_bn(num_filters)
        self.add_relu()
        self.add_conv(num_filters, num_filters, kernel=3, stride=1, pad=1)
        if spatial_batch_norm:
            self.add_spatial_bn(num_filters)
        shortcut = self._shortcut(block_input, input_filters, num_filters, stride, spatial_batch_norm)
        return self._finish_block(shortcut)


# (blocks, base filters, output filters) of ResNet-50's stages conv2_x .. conv5_x
_RESNET50_STAGES = ((3, 64, 256), (4, 128, 512), (6, 256, 1024), (3, 512, 2048))


def create_resnet50(model, data, num_input_channels, num_labels, label=None, is_test=False, no_loss=False,
                    no_bias=0, conv1_kernel=7, conv1_stride=2, final_avg_kernel=7):
    """ResNet-50 on `data` (NCHW). Returns the logits `last_out_L<num_labels>` when
    no_loss, (softmax, loss) with a label, else the softmax."""
    brew.conv(model, data, "conv1", num_input_channels, 64, weight_init=_MSRA, kernel=conv1_kernel,
              stride=conv1_stride, pad=3, no_bias=no_bias)
    brew.spatial_bn(model, "conv1", "conv1_spatbn_relu", 64, epsilon=1e-3, momentum=0.1, is_test=is_test)
    brew.relu(model, "conv1_spatbn_relu", "conv1_spatbn_relu")
    brew.max_pool(model, "conv1_spatbn_relu", "pool1", kernel=3, stride=2)
    builder = ResNetBuilder(model, "pool1", no_bias=no_bias, is_test=is_test, spatial_bn_mom=0.1)
    in_filters = 64
    for stage, (blocks, base, out) in enumerate(_RESNET50_STAGES):
        for block in range(blocks):
            builder.add_bottleneck(in_filters, base, out, down_sampling=(stage > 0 and block == 0))
            in_filters = out
    final_avg = brew.average_pool(model, builder.prev_blob, "final_avg", kernel=final_avg_kernel, stride=1)
    last_out = brew.fc(model, final_avg, "last_out_L{}".format(num_labels), 2048, num_labels)
    return _head(model, last_out, label, no_loss)


def create_resnet_32x32(model, data, num_input_channels, num_groups, num_labels, is_test=False):
    """The CIFAR ResNet (He et al. 2015, section 4.2): a 3x3 conv of 16 filters, three
    groups of 2 * num_groups simple blocks (16, 32, 64 filters; the second and third
    start with stride 2), an 8x8 average pool and FC; returns the softmax."""
    brew.conv(model, data, "conv1", num_input_channels, 16, kernel=3, stride=1)
    brew.spatial_bn(model, "conv1", "conv1_spatbn", 16, epsilon=1e-3, is_test=is_test)
    brew.relu(model, "conv1_spatbn", "relu1")
    builder = ResNetBuilder(model, "relu1", no_bias=0, is_test=is_test)
    prev_filters = 16
    for group, filters in enumerate((16, 32, 64)):
        for block in range(2 * num_groups):
            builder.add_simple_block(prev_filters if block == 0 else filters, filters,
                                     down_sampling=(block == 0 and group > 0))
        prev_filters = filters
    brew.average_pool(model, builder.prev_blob, "final_avg", kernel=8, stride=1)
    brew.fc(model, "final_avg", "last_out", 64, num_labels)
    return brew.softmax(model, "last_out", "softmax")


def _head(model, last_out, label, no_loss):
    if no_loss:
        return last_out
    if label is not None:
        return tuple(model.SoftmaxWithLoss([last_out, label], ["softmax", "loss"]))
    return brew.softmax(model, last_out, "softmax")
