"""caffe2.python.predictor_constants: the names predictor files use (Caffe2's
PredictorConsts defaults). `from caffe2py.predictor_constants import predictor_constants`."""
from types import SimpleNamespace

predictor_constants = SimpleNamespace(
    # "!!" sorts first, so sorted dbs (lmdb, leveldb) hold the MetaNetDef before the parameters
    META_NET_DEF="!!META_NET_DEF",
    PREDICTOR_DBREADER="!!PREDICTOR_DBREADER",
    PARAMETERS_BLOB_TYPE="PARAMETERS_BLOB_TYPE",
    INPUTS_BLOB_TYPE="INPUTS_BLOB_TYPE",
    OUTPUTS_BLOB_TYPE="OUTPUTS_BLOB_TYPE",
    GLOBAL_INIT_NET_TYPE="GLOBAL_INIT_NET_TYPE",
    PREDICT_INIT_NET_TYPE="PREDICT_INIT_NET_TYPE",
    PREDICT_NET_TYPE="PREDICT_NET_TYPE",
    SINGLE_PREDICTOR="SINGLE_PREDICTOR",
    MULTI_PREDICTOR="MULTI_PREDICTOR",
    TRAIN_INIT_PLAN_TYPE="TRAIN_INIT_PLAN_TYPE",
    TRAIN_PLAN_TYPE="TRAIN_PLAN_TYPE",
    SHAPE_INFO_BLOB="SHAPE_INFO_BLOB",
    DEFERRED_BLOB_READER="__DEFERRED_BLOB_READER__",
)
