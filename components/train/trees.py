"""Gradient-boosted trees as TensorFlow ops: an XGBoost booster read into flat node arrays
and evaluated by gathers, so a tree model exports as the same kind of SavedModel as a Keras
model and every serving route (TensorFlow Serving, Vertex AI's TensorFlow runtime, KServe,
batch prediction, MLflow) serves it unchanged.

Every tree of the booster goes into one set of arrays (a node's children are indices into
the same arrays; a leaf points at itself). Each row walks every tree at once for as many
steps as the deepest tree, choosing at each node as XGBoost does:

* a numeric split goes left when ``value < split_condition`` (both float32);
* a categorical split goes right when the category is in the node's set, left otherwise;
* a missing value (NaN) goes the node's default direction.

The leaves' values are summed per output group (one per class of a multi-class model), and
the booster's intercept is added, giving XGBoost's margin (``output_margin=True``). The
intercept is read from the booster itself, as margin minus the trees' sum, so no reading of
``base_score`` (whose encoding changed between XGBoost releases) is needed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

#: Bits per word of a categorical node's set.
_WORD = 32


@dataclass(frozen=True)
class Forest:
    """A booster's trees as flat arrays (see the module's docstring)."""

    feature: np.ndarray  # int32 [nodes]: the feature a node splits on (0 at leaves)
    threshold: np.ndarray  # float32 [nodes]
    left: np.ndarray  # int32 [nodes]: a leaf points at itself
    right: np.ndarray  # int32 [nodes]
    default_left: np.ndarray  # bool [nodes]
    leaf: np.ndarray  # float32 [nodes]: the value at leaves, 0 elsewhere
    category_row: np.ndarray  # int32 [nodes]: row of ``category_bits``, -1 = numeric split
    category_bits: np.ndarray  # int32 [categorical nodes + 1, words]: categories going right
    roots: np.ndarray  # int32 [trees]
    group: np.ndarray  # int32 [trees]: the output (class) each tree adds to
    depth: int  # steps that take every row of every tree to a leaf
    groups: int  # outputs: classes of a multi-class model, else 1
    intercept: np.ndarray  # float32 [groups]: added to the trees' sum

    @property
    def trees(self) -> int:
        return int(self.roots.size)


def _tree_depth(left: list[int], right: list[int]) -> int:
    depth, frontier = 0, [0]
    while True:
        children = [c for n in frontier for c in (left[n], right[n]) if c >= 0]
        if not children:
            return depth
        depth, frontier = depth + 1, children


def read_forest(booster, intercept=None) -> Forest:
    """The trees of an XGBoost ``booster`` as a :class:`Forest`; ``intercept`` (one value
    per group) is the margin the booster adds to its trees (:func:`measure_intercept`)."""
    model = json.loads(bytes(booster.save_raw("json")))
    learner = model["learner"]
    trees = learner["gradient_booster"]["model"]["trees"]
    info = learner["gradient_booster"]["model"].get("tree_info") or [0] * len(trees)
    groups = max(1, int(learner["learner_model_param"].get("num_class", "0") or 0))
    columns: dict[str, list] = {k: [] for k in ("feature", "threshold", "left", "right",
                                               "default_left", "leaf", "category_row")}
    bit_rows: list[np.ndarray] = []
    roots, depth = [], 0
    for tree in trees:
        offset = len(columns["feature"])
        roots.append(offset)
        left, right = tree["left_children"], tree["right_children"]
        depth = max(depth, _tree_depth(left, right))
        split_type = tree.get("split_type") or [0] * len(left)
        cat_nodes = tree.get("categories_nodes") or []
        segments = tree.get("categories_segments") or []
        sizes = tree.get("categories_sizes") or []
        categories = tree.get("categories") or []
        sets = {node: categories[start:start + size]
                for node, start, size in zip(cat_nodes, segments, sizes, strict=True)}
        for n in range(len(left)):
            is_leaf = left[n] < 0
            columns["feature"].append(0 if is_leaf else tree["split_indices"][n])
            columns["threshold"].append(0.0 if is_leaf else tree["split_conditions"][n])
            columns["left"].append(offset + (n if is_leaf else left[n]))
            columns["right"].append(offset + (n if is_leaf else right[n]))
            columns["default_left"].append(bool(tree["default_left"][n]))
            columns["leaf"].append(tree["split_conditions"][n] if is_leaf else 0.0)
            if not is_leaf and split_type[n] == 1:
                columns["category_row"].append(len(bit_rows) + 1)
                bit_rows.append(np.asarray(sets.get(n, []), dtype=np.int64))
            else:
                columns["category_row"].append(-1)
    words = max([int(s.max()) // _WORD + 1 for s in bit_rows if s.size] or [1])
    bits = np.zeros((len(bit_rows) + 1, words), dtype=np.uint32)  # row 0: numeric nodes
    for row, members in enumerate(bit_rows, 1):
        for category in members:
            bits[row, category // _WORD] |= np.uint32(1) << np.uint32(category % _WORD)
    if intercept is None:
        intercept = np.zeros(groups, np.float32)
    return Forest(
        feature=np.asarray(columns["feature"], np.int32),
        threshold=np.asarray(columns["threshold"], np.float32),
        left=np.asarray(columns["left"], np.int32),
        right=np.asarray(columns["right"], np.int32),
        default_left=np.asarray(columns["default_left"], bool),
        leaf=np.asarray(columns["leaf"], np.float32),
        category_row=np.asarray(columns["category_row"], np.int32),
        category_bits=bits.view(np.int32),
        roots=np.asarray(roots, np.int32),
        group=np.asarray(info, np.int32),
        depth=depth,
        groups=groups,
        intercept=np.asarray(intercept, np.float32).reshape(groups),
    )


def measure_intercept(booster, matrix) -> np.ndarray:
    """The margin the booster adds to its trees' sum, one value per group: XGBoost's
    margin minus the sum of the leaves it reached (``pred_leaf``) on the rows of
    ``matrix`` (a DMatrix), as the median over the rows."""
    forest = read_forest(booster)
    margin = np.asarray(booster.predict(matrix, output_margin=True), np.float64)
    margin = margin.reshape(margin.shape[0], -1)
    leaves = np.asarray(booster.predict(matrix, pred_leaf=True), np.int64)
    leaves = leaves.reshape(leaves.shape[0], -1)
    values = forest.leaf.astype(np.float64)[forest.roots[None, :] + leaves]
    sums = np.zeros_like(margin)
    for tree in range(forest.trees):
        sums[:, forest.group[tree]] += values[:, tree]
    return np.median(margin - sums, axis=0).astype(np.float32)


def tree_margin(forest: Forest, features, tf):
    """XGBoost's margin for ``features`` (float32 ``[rows, features]``, NaN missing), in
    TensorFlow ops: ``[rows, groups]``. ``forest``'s arrays may be tf.Variables."""
    rows = tf.shape(features)[0]
    node = tf.tile(tf.reshape(forest.roots, (1, -1)), tf.stack([rows, 1]))
    words = tf.shape(forest.category_bits)[1]
    for _ in range(max(forest.depth, 0)):
        value = tf.gather(features, tf.gather(forest.feature, node), batch_dims=1)
        missing = tf.math.is_nan(value)
        numeric_left = value < tf.gather(forest.threshold, node)
        row = tf.gather(forest.category_row, node)
        code = tf.cast(tf.where(missing, tf.zeros_like(value), value), tf.int32)
        word = code // _WORD
        valid = (code >= 0) & (word < words)
        bits = tf.gather_nd(forest.category_bits,
                            tf.stack([tf.maximum(row, 0), tf.clip_by_value(word, 0, words - 1)],
                                     axis=-1))
        in_set = valid & (tf.bitwise.bitwise_and(tf.bitwise.right_shift(bits, code % _WORD), 1)
                          == 1)
        go_left = tf.where(row >= 0, tf.logical_not(in_set), numeric_left)
        go_left = tf.where(missing, tf.gather(forest.default_left, node), go_left)
        node = tf.where(go_left, tf.gather(forest.left, node), tf.gather(forest.right, node))
    leaves = tf.gather(forest.leaf, node)  # [rows, trees]
    by_group = tf.one_hot(forest.group, forest.groups, dtype=tf.float32)  # [trees, groups]
    return tf.matmul(leaves, by_group) + forest.intercept[None, :]


def numpy_margin(forest: Forest, features: np.ndarray) -> np.ndarray:
    """The same walk in NumPy (a reference for tests and for checking an export)."""
    features = np.asarray(features, np.float32)
    node = np.tile(forest.roots[None, :], (features.shape[0], 1))
    bits = forest.category_bits.view(np.uint32)
    for _ in range(forest.depth):
        value = np.take_along_axis(features, forest.feature[node].astype(np.int64), axis=1)
        missing = np.isnan(value)
        numeric_left = value < forest.threshold[node]
        row = forest.category_row[node]
        code = np.where(missing, 0, value).astype(np.int64)
        word = code // _WORD
        valid = (code >= 0) & (word < bits.shape[1])
        found = bits[np.maximum(row, 0), np.clip(word, 0, bits.shape[1] - 1)]
        in_set = valid & (((found >> (code % _WORD).astype(np.uint32)) & 1) == 1)
        go_left = np.where(row >= 0, ~in_set, numeric_left)
        go_left = np.where(missing, forest.default_left[node], go_left)
        node = np.where(go_left, forest.left[node], forest.right[node])
    sums = np.zeros((features.shape[0], forest.groups), np.float64)
    leaves = forest.leaf[node]
    for tree in range(forest.trees):
        sums[:, forest.group[tree]] += leaves[:, tree]
    return (sums + forest.intercept[None, :]).astype(np.float32)
