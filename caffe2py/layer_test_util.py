"""caffe2.python.layer_test_util: LayersTestCase, the base of layer tests.

Each test starts with a fresh workspace and a LayerModelHelper `self.model` whose
input_feature_schema has one field, float_features (float32, 32 wide). Helpers
build the nets of the model's layers and compare a net's ops with OpSpecs.
"""
from collections import namedtuple

import numpy as np

from . import core, layer_model_helper, layer_model_instantiator, schema, test_util, utils, workspace
from .proto import caffe2_pb2


class OpSpec(namedtuple("OpSpec", "type input output arg")):
    """An expected op: its type, inputs, outputs (None: any; a None entry: any blob
    at that position) and arguments ({name: value}; None: any)."""

    def __new__(cls, op_type, op_input, op_output, op_arg=None):
        return super().__new__(cls, op_type, op_input, op_output, op_arg)


class LayersTestCase(test_util.TestCase):

    def setUp(self):
        super().setUp()
        self.setup_example()

    def setup_example(self):
        # hypothesis calls this before each example (an undocumented hook), so every
        # example gets its own workspace and model
        workspace.ResetWorkspace()
        self.reset_model()

    def reset_model(self, input_feature_schema=None, trainer_extra_schema=None):
        input_feature_schema = input_feature_schema or schema.Struct(
            ("float_features", schema.Scalar((np.float32, (32,)))))
        trainer_extra_schema = trainer_extra_schema or schema.Struct()
        self.model = layer_model_helper.LayerModelHelper(
            "test_model", input_feature_schema=input_feature_schema, trainer_extra_schema=trainer_extra_schema)

    def new_record(self, schema_obj):
        return schema.NewRecord(self.model.net, schema_obj)

    def get_training_nets(self, add_constants=False):
        """(init net, train net) of the layers' TRAINING ops, without gradients; the
        init net fills the global constants only when add_constants."""
        train_net = core.Net("train_net")
        train_init_net = (self.model.create_init_net("train_init_net") if add_constants
                          else core.Net("train_init_net"))
        for layer in self.model.layers:
            layer.add_operators(train_net, train_init_net)
        return train_init_net, train_net

    def get_eval_net(self):
        return layer_model_instantiator.generate_eval_net(self.model)

    def get_predict_net(self):
        return layer_model_instantiator.generate_predict_net(self.model)

    def run_train_net(self):
        self.model.output_schema = schema.Struct()
        train_init_net, train_net = layer_model_instantiator.generate_training_nets(self.model)
        workspace.RunNetOnce(train_init_net)
        workspace.RunNetOnce(train_net)

    def run_train_net_forward_only(self, num_iter=1):
        self.model.output_schema = schema.Struct()
        train_init_net, train_net = layer_model_instantiator.generate_training_nets_forward_only(self.model)
        workspace.RunNetOnce(train_init_net)
        assert num_iter > 0, "num_iter must be larger than 0"
        workspace.CreateNet(train_net)
        workspace.RunNet(train_net.Proto().name, num_iter=num_iter)

    def assertBlobsEqual(self, spec_blobs, op_blobs):
        if spec_blobs is None:
            return
        self.assertEqual(len(spec_blobs), len(op_blobs))
        for expected, actual in zip(spec_blobs, op_blobs):
            if expected is not None:
                self.assertEqual(expected, actual)

    def assertArgsEqual(self, spec_args, op_args):
        self.assertEqual(len(spec_args), len(op_args))
        expected = caffe2_pb2.OperatorDef()
        for arg in op_args:     # in the op's order
            expected.arg.add().CopyFrom(utils.MakeArgument(arg.name, spec_args[arg.name]))
        self.assertEqual(expected.arg, op_args)

    def assertNetContainOps(self, net, op_specs):
        """net's ops are exactly op_specs, in order; returns the ops."""
        ops = net.Proto().op
        self.assertEqual(len(op_specs), len(ops))
        for op, spec in zip(ops, op_specs):
            self.assertEqual(spec.type, op.type)
            self.assertBlobsEqual(spec.input, op.input)
            self.assertBlobsEqual(spec.output, op.output)
            if spec.arg is not None:
                self.assertArgsEqual(spec.arg, op.arg)
        return ops
