"""Hierarchical softmax (Caffe2's HSoftmax / HSoftmaxGradient / HSoftmaxSearch /
HuffmanTreeHierarchy).

A word's path is a list of steps (index, length, target): rows index .. index+length
of the stacked weights W [N, K] and bias b [N] give that node's logits, and the loss
adds -log(softmax[target]) (clamped at 1e-20). The intermediate output stores, per
sample and step in order, the step's logits then its softmax; the gradient walks them
backwards. Callers check that every step's rows lie inside W and targets inside the
step."""
import numpy as np

F32 = np.float32
LOG_THRESHOLD = F32(1e-20)


def intermediate_size(labels, paths):
    return int(sum(2 * length for w in labels for (_, length, _) in paths[int(w)]))


def _softmax(z):
    e = np.exp(z - z.max())
    return (e / e.sum()).astype(F32)


def hsoftmax(x, w, b, labels, paths):
    """(Y [M], intermediate [sum of 2 * lengths])."""
    m = labels.size
    y = np.zeros(m, F32)
    inter = np.empty(intermediate_size(labels, paths), F32)
    at = 0
    for s in range(m):
        for index, length, target in paths[int(labels[s])]:
            fc = (w[index:index + length] @ x[s] + b[index:index + length]).astype(F32)
            sm = _softmax(fc)
            inter[at:at + length] = fc
            inter[at + length:at + 2 * length] = sm
            at += 2 * length
            y[s] += F32(-1.0) if target < 0 else -np.log(max(sm[target], LOG_THRESHOLD))
    return y, inter


def hsoftmax_gradient(x, w, b, labels, paths, inter, dy):
    """(dX, dW, db, d intermediate)."""
    dx, dw, db = np.zeros_like(x, F32), np.zeros_like(w, F32), np.zeros_like(b, F32)
    dinter = np.zeros_like(inter, F32)
    at = inter.size
    for s in range(labels.size - 1, -1, -1):
        for index, length, target in reversed(paths[int(labels[s])]):
            sm = inter[at - length:at]
            d_ent = np.zeros(length, F32)
            d_ent[target] = -dy[s] / max(sm[target], LOG_THRESHOLD)
            dinter[at - length:at] = d_ent
            at -= length
            d_soft = ((d_ent - F32(np.dot(sm, d_ent))) * sm).astype(F32)
            dinter[at - length:at] = d_soft
            at -= length
            dw[index:index + length] += np.outer(d_soft, x[s])
            db[index:index + length] += d_soft
            dx[s] += w[index:index + length].T @ d_soft
    return dx, dw, db, dinter


def search(x, w, b, root, beam, top_n):
    """(names [M, top_n] object, scores [M, top_n]) of HSoftmaxSearch: from the root,
    children (nodes and words) scoring -log p + parent score below parent + beam are
    kept, nodes expanded; the top_n lowest scores win (ties in tree order)."""
    m = x.shape[0]
    names = np.full((m, top_n), "", dtype=object)
    scores = np.zeros((m, top_n), F32)
    for s in range(m):
        info = []
        _expand(x[s], w, b, root, F32(0), beam, info)
        order = sorted(range(len(info)), key=lambda k: info[k][1])[:top_n]
        for j, k in enumerate(order):
            names[s, j], scores[s, j] = info[k]
    return names, scores


def _expand(xs, w, b, node, parent_score, beam, info):
    """Caffe2's pruning + extractNodes: this node's kept entries (children first, then
    words) go to info before any grandchild's."""
    n_children = len(node.children)
    length = n_children + len(node.word_ids)
    if length == 0:
        return
    off = node.offset
    sm = _softmax((w[off:off + length] @ xs + b[off:off + length]).astype(F32))
    score = (-np.log(np.maximum(sm, LOG_THRESHOLD)) + parent_score).astype(F32)
    kept_children = []
    for i in range(n_children):
        if score[i] < parent_score + F32(beam):
            info.append((node.children[i].name, score[i]))
            kept_children.append((node.children[i], score[i]))
    for i in range(n_children, length):
        if score[i] < parent_score + F32(beam):
            info.append((str(node.word_ids[i - n_children]), score[i]))
    for child, child_score in kept_children:
        _expand(xs, w, b, child, child_score, beam, info)


# ----------------------------------------------------------------- Huffman tree

class _Heap:
    """std::priority_queue with Caffe2's comparator (smallest count on top), using
    libstdc++'s push_heap / pop_heap, so equal counts come out in Caffe2's order."""

    def __init__(self):
        self.items = []

    @staticmethod
    def _less(a, b):              # the comparator: a "below" b when a.count > b.count
        return a[1] > b[1]

    def _sift_up(self, hole, top, value):
        parent = (hole - 1) // 2
        while hole > top and self._less(self.items[parent], value):
            self.items[hole] = self.items[parent]
            hole = parent
            parent = (hole - 1) // 2
        self.items[hole] = value

    def push(self, value):
        self.items.append(value)
        self._sift_up(len(self.items) - 1, 0, value)

    def pop(self):
        items = self.items
        top = items[0]
        value = items[-1]
        n = len(items) - 1           # heap length after the pop
        if n:
            hole, child = 0, 0
            while child < (n - 1) // 2:
                child = 2 * (child + 1)
                if self._less(items[child], items[child - 1]):
                    child -= 1
                items[hole] = items[child]
                hole = child
            if n % 2 == 0 and child == (n - 2) // 2:
                child = 2 * (child + 1)
                items[hole] = items[child - 1]
                hole = child - 1
            self._sift_up(hole, 0, value)
        items.pop()
        return top

    def __len__(self):
        return len(self.items)


def huffman_tree(labels, num_classes, tree_cls):
    """The TreeProto of a Huffman code over the label counts (Caffe2's construction,
    including its offset numbering)."""
    counts = np.bincount(labels, minlength=num_classes)[:num_classes]
    heap = _Heap()
    for i in range(num_classes):
        heap.push((i, int(counts[i]), -1, -1))          # (label, count, left, right)
    tree = []
    while len(heap):
        left = (len(tree), heap.pop())
        tree.append(left[1])
        if len(heap):
            right = (len(tree), heap.pop())
            tree.append(right[1])
            heap.push((-1, left[1][1] + right[1][1], left[0], right[0]))

    def is_leaf(k):
        return tree[k][2] == -1 and tree[k][3] == -1

    offset = [0]

    def build(k, node):
        if k == -1 or is_leaf(k):
            return
        _, _, lch, rch = tree[k]
        if lch != -1:
            if is_leaf(lch):
                node.word_ids.append(tree[lch][0])
            else:
                child = node.children.add()
                child.offset = offset[0]
                offset[0] += 2
                build(lch, child)
        if rch != -1:
            if is_leaf(rch):
                node.word_ids.append(tree[rch][0])
                offset[0] += 1
            else:
                child = node.children.add()
                child.offset = offset[0]
                offset[0] += 2
                build(rch, child)

    result = tree_cls()
    root = result.root_node
    root.offset = 0
    offset[0] = 2
    if tree:
        build(len(tree) - 1, root)
    return result
