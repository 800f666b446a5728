"""caffe2.python.layers.select_record_by_context: SelectRecordByContext.

input: a Struct whose field names are InstantiationContexts (training, eval,
prediction, accumulate_pred), each a record of one schema. Each net gets the
record of its context (default_output_record_field's when its context has none),
aliased (copied with use_copy) to the output.
"""
from .. import schema
from .layers import InstantiationContext, ModelLayer


class SelectRecordByContext(ModelLayer):

    def __init__(self, model, input_record, name="select_record_by_context", check_field_metas=True,
                 use_copy=False, default_output_record_field=None, **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        assert isinstance(input_record, schema.Struct), "SelectRecordByContext takes a Struct"
        assert len(input_record) > 1, "SelectRecordByContext needs records for more than one context"
        self.use_copy = use_copy
        self.default_output_record = (input_record[default_output_record_field]
                                      if default_output_record_field is not None else None)
        reference = input_record[0]
        for _, record in input_record.get_children():
            assert schema.equal_schemas(record, reference, check_field_metas=check_field_metas), \
                "SelectRecordByContext: the contexts' records differ in schema"
        self.output_schema = schema.NewRecord(model.net, reference)

    def _set_output_blobs(self, net, context):
        record = self.input_record.get(context, self.default_output_record)
        assert record is not None, "%s context is not in the input record and there is no default" % context
        for in_blob, out_blob in zip(record.field_blobs(), self.output_schema.field_blobs()):
            if self.use_copy:
                net.Copy(in_blob, out_blob)
            else:
                net.Alias(in_blob, out_blob)

    def add_ops(self, net):
        self._set_output_blobs(net, InstantiationContext.PREDICTION)

    def add_eval_ops(self, net):
        self._set_output_blobs(net, InstantiationContext.EVAL)

    def add_train_ops(self, net):
        self._set_output_blobs(net, InstantiationContext.TRAINING)

    def add_ops_to_accumulate_pred(self, net):
        self._set_output_blobs(net, InstantiationContext.ACCUMULATE_PRED)
