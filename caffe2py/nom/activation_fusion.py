"""Fold an activation op into the op before it (Caffe2's fuseActivation).

Op -> t -> Act -> u, where t has Act as its only reader, becomes Op -> u (or Op -> t
when u has the op's first input's name, since the op then cannot write u in place).
If that leaves a reader of the fused output writing a blob of the same name, the
fused output is renamed `<name>_fusion_fix` so no op becomes in-place by accident.
"""
from .representation import NeuralNetData


def fuse_activation(nn, op_types, activation_type, should_fuse, postprocess):
    graph = nn.dataFlow
    for op_node in [n for n in graph.operators if n.getName() in op_types]:
        if not graph.hasNode(op_node):
            continue
        outputs = op_node.getOutputs()
        if len(outputs) != 1:
            continue
        op_output = outputs[0]
        consumers = op_output.getConsumers()
        if len(consumers) != 1 or consumers[0].getName() != activation_type:
            continue
        act_node = consumers[0]
        act_outputs = act_node.getOutputs()
        if len(act_outputs) != 1 or not op_node.getInputs() or not should_fuse(op_node):
            continue
        act_output = act_outputs[0]
        if act_output.getName() != op_node.getInputs()[0].getName():
            graph.replaceNode(op_output, act_output)
            graph.deleteNode(act_node)
            graph.deleteNode(op_output)
            fused = act_output
        else:
            graph.replaceNode(act_output, op_output)
            graph.deleteNode(act_node)
            graph.deleteNode(act_output)
            fused = op_output
        name = fused.getName()
        if any(out.getName() == name for reader in fused.getConsumers()
               for out in reader.getOutputs()):
            renamed = graph.createNode(NeuralNetData(name + "_fusion_fix"))
            graph.replaceNode(fused, renamed)
        postprocess(op_node)
