"""caffe2.python.net_drawer, importable so scripts that import it load; drawing nets
(pydot/graphviz output) is not implemented yet (issue 24). Every drawing function
raises a Caffe2Error saying so; the style constants are Caffe2's."""
from .errors import Caffe2Error

OP_STYLE = {"shape": "box", "color": "#0F9D58", "style": "filled", "fontcolor": "#FFFFFF"}
BLOB_STYLE = {"shape": "octagon"}


def _not_implemented(name):
    def draw(*args, **kwargs):  # noqa: ARG001
        raise Caffe2Error("net_drawer.%s: drawing nets is not implemented in caffe2py yet (issue 24); "
                          "inspect the net with print(net.Proto()) or `caffe2py shapes` meanwhile" % name)
    draw.__name__ = name
    draw.__doc__ = "Caffe2's net_drawer.%s (not implemented yet: raises Caffe2Error)." % name
    return draw


GetOpNodeProducer = _not_implemented("GetOpNodeProducer")
GetBlobNodeProducer = _not_implemented("GetBlobNodeProducer")
GetPydotGraph = _not_implemented("GetPydotGraph")
GetPydotGraphMinimal = _not_implemented("GetPydotGraphMinimal")
GetOperatorMapForPlan = _not_implemented("GetOperatorMapForPlan")
GetPlanGraph = _not_implemented("GetPlanGraph")
GetGraphInJson = _not_implemented("GetGraphInJson")
GetGraphPngSafe = _not_implemented("GetGraphPngSafe")
main = _not_implemented("main")
