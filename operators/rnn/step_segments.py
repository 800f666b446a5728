"""Where a RecurrentNetwork step net must be cut so that links sharing memory
stay in step (operators/rnn/rnn_ops.py applies links around runs of the step net).

In Caffe2 two links into the same external tensor may overlap (a convolution
over the last k inputs links a window of k steps that includes the step the
net itself writes through another link), and a write through one link is seen
at once through the other, because both are views of one buffer. caffe2py's
compiled nets pass values between ops in locals and commit them at the end, so
the op copies a written link back between runs: the step net is run in pieces,
cut after each op that writes a link whose window overlaps another link's window
of the same external tensor."""
from caffe2py.proto import caffe2_pb2


def _overlap(a, b):
    return (a is not b and a.external == b.external
            and a.offset < b.offset + b.window and b.offset < a.offset + a.window)


def segments(step_def, links):
    """The step net as a list of NetDefs run in order; one piece (the net itself)
    when no op writes a link whose window overlaps another link's window of the same
    external tensor (an LSTM's hidden_t_prev and hidden_t, at offsets 0 and 1, do not)."""
    shared = {a.internal for a in links if any(_overlap(a, b) for b in links)}
    cuts = [k + 1 for k, op in enumerate(step_def.op) if shared.intersection(op.output)]
    cuts = [c for c in cuts if c < len(step_def.op)]
    if not cuts:
        return [step_def]
    pieces, start = [], 0
    for stop in cuts + [len(step_def.op)]:
        piece = caffe2_pb2.NetDef()
        piece.CopyFrom(step_def)
        del piece.op[:]
        piece.op.extend(step_def.op[start:stop])
        # blobs earlier pieces made are this piece's inputs
        declared = set(piece.external_input)
        made_here = set()
        for op in piece.op:
            for blob in op.input:
                if blob not in declared and blob not in made_here:
                    piece.external_input.append(blob)
                    declared.add(blob)
            made_here.update(op.output)
        piece.name = "%s#%d" % (step_def.name, len(pieces))
        pieces.append(piece)
        start = stop
    return pieces
