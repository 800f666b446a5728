"""caffe2.python.layers.tags: labels a layer carries that decide which nets get it.

    with Tags(Tags.EXCLUDE_FROM_PREDICTION):
        model.Log(x, 1)          # in the train and eval nets, not the predict net

Every layer created inside the block takes the open blocks' tags
(ModelLayer.__init__ reads TagContext.current()). A Tags instance is also a
function decorator.
"""
import functools

from .. import context


class TagContext(context.DefaultManaged):
    """The stack of tags of the open Tags blocks (one per thread)."""

    def __init__(self, tags=None):
        self.tags = list(tags or [])

    def add_tags(self, tags):
        self.tags.extend(tags)

    def remove_tags(self, tags):
        assert self.tags[len(self.tags) - len(tags):] == list(tags), \
            "Tags blocks closed out of order: %s is not the end of %s" % (tags, self.tags)
        del self.tags[len(self.tags) - len(tags):]


class Tags:
    EXCLUDE_FROM_TRAIN = "exclude_from_train"
    EXCLUDE_FROM_EVAL = "exclude_from_eval"
    EXCLUDE_FROM_PREDICTION = "exclude_from_prediction"
    EXCLUDE_FROM_ACCUMULATE_PRED = "exclude_from_accumulate_pred"
    PREPROCESSING = "preprocessing"
    HANDLE_AS_SPARSE_LAYER = "handle_as_sparse_layer"
    PREFER_GPU = "prefer_gpu"
    CPU_ONLY = "cpu_only"
    LOCAL = "local"
    GLOBAL = "global"
    # a layer that lives in the predictor's feature-processing part
    FEATURE_TRANSFORM = "feature_transform"
    FEATURE_TRANSFORM_SCHEMA = "feature_transform_schema"

    # the tag sets that keep a layer in one kind of net only
    TRAIN_ONLY = [EXCLUDE_FROM_PREDICTION, EXCLUDE_FROM_EVAL, EXCLUDE_FROM_ACCUMULATE_PRED]
    EVAL_ONLY = [EXCLUDE_FROM_PREDICTION, EXCLUDE_FROM_TRAIN, EXCLUDE_FROM_ACCUMULATE_PRED]
    PREDICTION_ONLY = [EXCLUDE_FROM_TRAIN, EXCLUDE_FROM_EVAL, EXCLUDE_FROM_ACCUMULATE_PRED]

    def __init__(self, tags):
        self.tags = list(tags) if isinstance(tags, (list, tuple, set)) else [tags]

    def __enter__(self):
        TagContext.current().add_tags(self.tags)
        return self

    def __exit__(self, *exc):
        TagContext.current().remove_tags(self.tags)

    def __call__(self, func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with self:
                return func(*args, **kwargs)
        return wrapper
