"""SinkMaxPool (caffe2/opt/sink.cc): MaxPool -> Relu becomes Relu -> MaxPool, the same
values (ReLU is monotonic) with the ReLU on the larger tensor first."""


def sink_max_pool(nn):
    graph = nn.dataFlow
    for pool in [n for n in graph.operators if n.getName() == "MaxPool"]:
        outputs = pool.getOutputs()
        if len(pool.getInputs()) != 1 or len(outputs) != 1:
            continue
        if outputs[0] in nn.outputs:       # the pooled blob itself is a result: keep it
            continue
        consumers = outputs[0].getConsumers()
        if len(consumers) != 1 or consumers[0].getName() != "Relu":
            continue
        relu = consumers[0]
        if len(relu.getOutputs()) != 1:
            continue
        graph.swapNodes(pool, relu)
