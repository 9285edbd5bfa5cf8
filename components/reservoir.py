"""A bounded uniform sample of a stream of numbers (reservoir sampling, a batch at a time),
for quantiles and histograms of columns too long to keep whole: every value while fewer than
``size`` have come, then each value k (from 1) replaces a random slot with probability
size / k. The generator's seed is fixed, so the same stream gives the same sample."""

from __future__ import annotations

import numpy as np


class Reservoir:
    """``add(values)`` batch by batch; ``values`` is the sample, ``sampled`` whether it is
    one (more than ``size`` values came)."""

    def __init__(self, size: int, seed: int = 0) -> None:
        if size < 1:
            raise ValueError(f"a reservoir holds at least one value, not {size}")
        self.size = size
        self.seen = 0
        self.values = np.empty(0, np.float64)
        self._random = np.random.default_rng(seed)

    @property
    def sampled(self) -> bool:
        return self.seen > self.size

    def add(self, batch) -> None:
        batch = np.asarray(batch, np.float64).reshape(-1)
        room = max(0, self.size - self.values.size)
        if room:
            self.values = np.concatenate([self.values, batch[:room]])
        rest = batch[room:]
        if rest.size:
            seen = self.seen + room + np.arange(1, rest.size + 1)
            slots = (self._random.random(rest.size) * seen).astype(np.int64)
            kept = slots < self.size
            self.values[slots[kept]] = rest[kept]
        self.seen += batch.size
