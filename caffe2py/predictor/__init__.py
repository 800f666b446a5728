"""caffe2.python.predictor: saving and loading predictors (predictor_exporter for
db files with a MetaNetDef, mobile_exporter for init_net/predict_net pairs)."""
