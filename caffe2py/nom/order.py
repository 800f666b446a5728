"""The execution order of an NNModule's operators (its control flow).

A module built from a NetDef remembers the NetDef's op order. Operators created
later are placed as Caffe2's coalesceInsertedDataDependencies places them: a new
operator whose output an ordered one reads goes right before that reader; new
operators nobody ordered reads from go at the end. Last, the order is made to respect
the data flow (a producer runs before its consumers) while keeping the remembered
order wherever the data flow allows.
"""


def _producers(op_node):
    """The operators whose outputs `op_node` reads."""
    return [tensor.getProducer() for tensor in op_node.getInputs() if tensor.hasProducer()]


def execution_order(graph, remembered):
    """Operators of `graph` in the order to run them; `remembered` is the previous order
    (deleted nodes in it are dropped)."""
    order = [node for node in remembered if graph.hasNode(node) and node.isOperator()]
    placed = set(order)
    changed = True
    while changed:                       # pull new producers in before their readers
        changed = False
        for node in list(order):
            for producer in _producers(node):
                if producer not in placed:
                    order.insert(order.index(node), producer)
                    placed.add(producer)
                    changed = True
    order.extend(node for node in graph.getMutableNodes()
                 if node.isOperator() and node not in placed)
    return _respect_data_flow(order)


def _respect_data_flow(order):
    """A stable topological order: repeatedly the first listed operator whose producers
    have all run (the first remaining one when a cycle leaves none)."""
    members = set(order)
    pending = list(order)
    done = set()
    result = []
    while pending:
        for index, node in enumerate(pending):
            if all(p in done or p not in members or p is node for p in _producers(node)):
                break
        else:
            index = 0
        node = pending.pop(index)
        done.add(node)
        result.append(node)
    return result
