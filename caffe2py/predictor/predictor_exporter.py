"""caffe2.python.predictor.predictor_exporter: predictors saved as one db.

save_to_db writes the blob "!!META_NET_DEF" (a serialized MetaNetDef holding the
global init net, the predict init net and the predict net, plus the names of the
inputs, outputs and parameters) followed by the parameters. load_from_db reads the
MetaNetDef back through a DBReader left in the "!!PREDICTOR_DBREADER" blob, from
which the global init net then Loads the parameters; prepare_prediction_net runs
both init nets and returns the predict net, created in the workspace.
"""
import collections

from caffe2py import core, model_trust, model_trust_ops, scope, workspace
from caffe2py.predictor_constants import predictor_constants
from caffe2py.proto import caffe2_pb2, metanet_pb2

from . import predictor_py_utils as utils
from . import serde


def get_predictor_exporter_helper(submodelNetName):
    """A PredictorExportMeta stub, to compute a submodel's component names."""
    stub_net = core.Net(submodelNetName)
    return PredictorExportMeta(predict_net=stub_net, parameters=[], inputs=[], outputs=[], shapes=None,
                               name=submodelNetName, extra_init_net=None)


class PredictorExportMeta(collections.namedtuple(
        "PredictorExportMeta",
        "predict_net, parameters, inputs, outputs, shapes, name, extra_init_net, global_init_net, "
        "net_type, num_workers, trainer_prefix")):
    """What a predictor file holds: the predict net (core.Net, Plan, NetDef or PlanDef),
    its parameters, inputs and outputs (names or BlobReferences), optional input/output
    shapes for the predict init net, a name for several predictors in one file, extra
    nets appended to the predict init and global init nets, the net type and workers."""

    def __new__(cls, predict_net, parameters, inputs, outputs, shapes=None, name="",
                extra_init_net=None, global_init_net=None, net_type=None, num_workers=None,
                trainer_prefix=None):
        inputs = [str(i) for i in inputs]
        outputs = [str(o) for o in outputs]
        assert len(set(inputs)) == len(inputs), "All inputs to the predictor should be unique"
        parameters = [str(p) for p in parameters]
        assert set(parameters).isdisjoint(inputs), \
            "Parameters and inputs are required to be disjoint. Intersection: {}".format(
                set(parameters).intersection(inputs))
        assert set(parameters).isdisjoint(outputs), \
            "Parameters and outputs are required to be disjoint. Intersection: {}".format(
                set(parameters).intersection(outputs))
        shapes = shapes or {}
        if isinstance(predict_net, (core.Net, core.Plan)):
            predict_net = predict_net.Proto()
        assert isinstance(predict_net, (caffe2_pb2.NetDef, caffe2_pb2.PlanDef))
        return super().__new__(cls, predict_net, parameters, inputs, outputs, shapes, name,
                               extra_init_net, global_init_net, net_type, num_workers, trainer_prefix)

    def inputs_name(self):
        return utils.get_comp_name(predictor_constants.INPUTS_BLOB_TYPE, self.name)

    def outputs_name(self):
        return utils.get_comp_name(predictor_constants.OUTPUTS_BLOB_TYPE, self.name)

    def parameters_name(self):
        return utils.get_comp_name(predictor_constants.PARAMETERS_BLOB_TYPE, self.name)

    def global_init_name(self):
        return utils.get_comp_name(predictor_constants.GLOBAL_INIT_NET_TYPE, self.name)

    def predict_init_name(self):
        return utils.get_comp_name(predictor_constants.PREDICT_INIT_NET_TYPE, self.name)

    def predict_net_name(self):
        return utils.get_comp_name(predictor_constants.PREDICT_NET_TYPE, self.name)

    def train_init_plan_name(self):
        plan_name = utils.get_comp_name(predictor_constants.TRAIN_INIT_PLAN_TYPE, self.name)
        return self.trainer_prefix + "_" + plan_name if self.trainer_prefix else plan_name

    def train_plan_name(self):
        plan_name = utils.get_comp_name(predictor_constants.TRAIN_PLAN_TYPE, self.name)
        return self.trainer_prefix + "_" + plan_name if self.trainer_prefix else plan_name


def prepare_prediction_net(filename, db_type, device_option=None, trusted=None, data_roots=None):
    """Load a predictor db into the current workspace and return its predict net
    (a core.Net, already created in the workspace). The nets follow the model-trust
    policy (caffe2py/model_trust.py) unless trusted: no pickled Python builders,
    files only in data_roots (or read beside the db)."""
    with model_trust.applying(model_trust.loader_policy([filename], data_roots, trusted)):
        metanet_def = load_from_db(filename, db_type, device_option)
        workspace.RunNetOnce(utils.GetNet(metanet_def, predictor_constants.GLOBAL_INIT_NET_TYPE))
        workspace.RunNetOnce(utils.GetNet(metanet_def, predictor_constants.PREDICT_INIT_NET_TYPE))
        predict_net = core.Net(utils.GetNet(metanet_def, predictor_constants.PREDICT_NET_TYPE))
        workspace.CreateNet(predict_net)
    return predict_net


def _global_init_net(predictor_export_meta, db_type=None):
    net = core.Net("global-init")
    net.Load([predictor_constants.PREDICTOR_DBREADER], predictor_export_meta.parameters)
    net.Proto().external_input.extend([predictor_constants.PREDICTOR_DBREADER])
    net.Proto().external_output.extend(predictor_export_meta.parameters)
    if predictor_export_meta.global_init_net:
        net.AppendNet(predictor_export_meta.global_init_net)
    utils.AddModelIdArg(predictor_export_meta, net.Proto())
    return net.Proto()


def get_meta_net_def(predictor_export_meta, ws=None, db_type=None):
    """The MetaNetDef of a predictor; input/output shapes come from meta.shapes or
    from the blobs of workspace `ws` (the current one by default)."""
    ws = ws or workspace.current_workspace()
    meta_net_def = metanet_pb2.MetaNetDef()
    utils.AddNet(meta_net_def, predictor_export_meta.predict_init_name(),
                 utils.create_predict_init_net(ws, predictor_export_meta))
    utils.AddNet(meta_net_def, predictor_export_meta.global_init_name(),
                 _global_init_net(predictor_export_meta, db_type))
    utils.AddNet(meta_net_def, predictor_export_meta.predict_net_name(),
                 utils.create_predict_net(predictor_export_meta))
    utils.AddBlobs(meta_net_def, predictor_export_meta.parameters_name(), predictor_export_meta.parameters)
    utils.AddBlobs(meta_net_def, predictor_export_meta.inputs_name(), predictor_export_meta.inputs)
    utils.AddBlobs(meta_net_def, predictor_export_meta.outputs_name(), predictor_export_meta.outputs)
    return meta_net_def


def set_model_info(meta_net_def, project_str, model_class_str, version):
    assert isinstance(meta_net_def, metanet_pb2.MetaNetDef)
    meta_net_def.modelInfo.project = project_str
    meta_net_def.modelInfo.modelClass = model_class_str
    meta_net_def.modelInfo.version = version


def save_to_db(db_type, db_destination, predictor_export_meta, use_ideep=False, *args, **kwargs):  # noqa: ARG001
    """Write the predictor (MetaNetDef first, then the parameters from the current
    workspace) to a db. use_ideep only changed Caffe2's device type; it is ignored."""
    meta_net_def = get_meta_net_def(predictor_export_meta, *args, **kwargs)
    with core.DeviceScope(core.DeviceOption(caffe2_pb2.CPU)):
        workspace.FeedBlob(predictor_constants.META_NET_DEF, serde.serialize_protobuf_struct(meta_net_def))
    blobs_to_save = [predictor_constants.META_NET_DEF] + predictor_export_meta.parameters
    op = core.CreateOperator("Save", blobs_to_save, [], absolute_path=True, db=db_destination, db_type=db_type)
    workspace.RunOperatorOnce(op)


def load_from_db(filename, db_type, device_option=None, *args, trusted=None, data_roots=None,
                 **kwargs):  # noqa: ARG001
    """The MetaNetDef of a predictor db; leaves the db's reader in "!!PREDICTOR_DBREADER"
    for the global init net. device_option (default: the current device scope) is set
    on every op of the loaded nets. Unless trusted, the nets are checked against the
    model-trust policy now and marked to keep it wherever they run (model_trust.py)."""
    policy = model_trust.loader_policy([filename], data_roots, trusted)
    with model_trust.applying(policy):      # the db itself lies in a folder the policy reads
        create_db = core.CreateOperator("CreateDB", [], [core.BlobReference(predictor_constants.PREDICTOR_DBREADER)],
                                        db=filename, db_type=db_type)
        assert workspace.RunOperatorOnce(create_db), "Failed to create db {}".format(filename)
        # the MetaNetDef is always stored before the parameters
        load_meta_net_def = core.CreateOperator(
            "Load", [core.BlobReference(predictor_constants.PREDICTOR_DBREADER)],
            [core.BlobReference(predictor_constants.META_NET_DEF)])
        assert workspace.RunOperatorOnce(load_meta_net_def)
    blob = workspace.FetchBlob(predictor_constants.META_NET_DEF)
    if not isinstance(blob, bytes):
        blob = blob.item() if hasattr(blob, "item") else blob
        blob = blob if isinstance(blob, bytes) else str(blob).encode("utf-8")
    meta_net_def = serde.deserialize_protobuf_struct(blob, metanet_pb2.MetaNetDef)
    for net in [kv.value for kv in meta_net_def.nets] + [n for kv in meta_net_def.plans for n in kv.value.network]:
        model_trust_ops.check_net(net, policy)
        model_trust.mark(net, policy)
    if device_option is None:
        device_option = scope.CurrentDeviceScope()
    if device_option is not None:
        for kv in meta_net_def.nets:
            for op in kv.value.op:
                op.device_option.CopyFrom(device_option)
    return meta_net_def
