"""RowWiseCounter's update (caffe2/sgd/rowwise_counter): a per-row count of recent
updates that decays with a half-life measured in iterations."""
import math

import numpy as np


def decay_rate(halflife):
    """ln(2) / halflife: the counter loses half its weight every `halflife` iterations."""
    return math.log(2.0) / halflife


def update_rows(prev_iter, counter, indices, curr_iter, neg_log_rho):
    """In place, for each index in order: counter = 1 + exp(-delta * rate) * counter with
    delta = max(0, curr_iter - prev_iter), then prev_iter = max(curr_iter, prev_iter).
    A row named k times is done at once: after its first visit delta is 0, so each
    further visit adds exactly 1 (counter = k + exp(-delta * rate) * counter)."""
    rows, visits = np.unique(indices, return_counts=True)
    last = prev_iter[rows]
    delta = np.maximum(curr_iter - last, 0)
    counter[rows] = visits + np.exp(-delta * neg_log_rho) * counter[rows]
    prev_iter[rows] = np.maximum(last, curr_iter)
