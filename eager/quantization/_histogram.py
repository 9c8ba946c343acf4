"""The histogram observer's host-side arithmetic (MegEngine's `HistogramObserver`): merging a
batch into a running histogram whose range grows, and the search for the range that minimizes
the L2 error of quantizing the histogram's mass to the dtype's grid.

Values stay numpy float32 scalars where MegEngine's are (its statistics come from float32
tensors), so that the grids and the search's choices are the same as MegEngine's.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

_F32 = np.float32


def _regrid(old_min: Any, old_max: Any, new_min: Any, new_max: Any, bins: int,
            upsample: int) -> tuple:
    """The widened range, aligned so that the old bins, each split in `upsample`, fall on the
    new grid: (new_min, new_max, downsample rate, index of the old range's start)."""
    fine = (old_max - old_min) / (bins * upsample)
    down = int(np.ceil((new_max - new_min) / (bins * fine)))
    extra = down * (bins * fine) - (new_max - new_min)
    new_min, new_max = new_min - extra / 2, new_max + extra / 2
    return new_min, new_max, down, int(np.round((old_min - new_min) / fine))


def _resample(hist: np.ndarray, upsample: int, down: int, start: int, bins: int) -> np.ndarray:
    """The old histogram's mass on the new grid: spread evenly over `upsample` fine bins each,
    placed at `start`, and summed `down` fine bins at a time."""
    fine = np.zeros(bins * down)
    fine[start:start + bins * upsample] = hist.repeat(upsample)
    integral = np.cumsum(fine)[down - 1::down]
    return np.diff(integral, prepend=0.0) / upsample


def combine(hist: np.ndarray, low: Any, high: Any, x: np.ndarray, bins: int,
            upsample: int) -> tuple:
    """The running (histogram, min, max) after the batch `x`."""
    x_min, x_max = x.min(), x.max()
    if hist[0] == -1:  # the first batch: its own range
        new, _ = np.histogram(x, bins, (x_min, x_max))
        return new, x_min, x_max
    low, high = _F32(low), _F32(high)
    new_min, new_max = min(x_min, low), max(x_max, high)
    new_min, new_max, down, start = _regrid(low, high, new_min, new_max, bins, upsample)
    new, _ = np.histogram(x, bins, (new_min, new_max))
    new = new.astype(np.float64)
    if new_min == low and new_max == high:
        return new + hist, new_min, new_max
    return new + _resample(hist, upsample, down, start, bins), new_min, new_max


def _l2(begin: Any, end: Any, density: Any) -> Any:
    """The squared error of mass spread evenly between offsets `begin` and `end` from the
    centre of the grid cell it is rounded to: density * (end^3 - begin^3) / 3."""
    return density * (end * end * end - begin * begin * begin) / 3


def quantization_error(hist: np.ndarray, bin_width: Any, start: int, end: int,
                       dst_bins: int) -> float:
    """The L2 error of quantizing the histogram to `dst_bins` cells spanning bins start..end."""
    cell = bin_width * (end - start + 1) / dst_bins
    if cell == 0.0:
        return 0.0
    src = np.arange(len(hist))
    begin = (src - start) * bin_width
    stop = begin + bin_width
    first = np.clip(np.floor(begin / cell), 0, dst_bins - 1)
    last = np.clip(np.floor(stop / cell), 0, dst_bins - 1)
    density = hist / bin_width
    centre_first, centre_last = first * cell + cell / 2, last * cell + cell / 2
    one_cell = _l2(begin - centre_first, stop - centre_first, density)
    spanning = (_l2(begin - centre_first, cell / 2, density)
                + (last - first - 1) * _l2(-cell / 2, cell / 2, density)
                + _l2(-cell / 2, stop - centre_last, density))
    return float(np.sum(np.where(first == last, one_cell, spanning)))


def non_linear_search(hist: np.ndarray, low: Any, high: Any, dst_bins: int) -> tuple[int, int]:
    """The first and last bin of the range to quantize: the quantile bounds move inwards by
    1e-5 at a time from the side with fewer bins to drop, while the L2 error falls."""
    bins = len(hist)
    bin_width = (_F32(high) - _F32(low)) / bins
    total, cumulative = np.sum(hist), np.cumsum(hist, axis=0)
    step, alpha, beta = 1e-5, 0.0, 1.0
    start, end, best = 0, bins - 1, math.inf
    while alpha < beta:
        next_alpha, next_beta = alpha + step, beta - step
        left, right = start, end
        while left < end and cumulative[left] < next_alpha * total:
            left += 1
        while right > start and cumulative[right] > next_beta * total:
            right -= 1
        next_start, next_end = start, end
        if left - start > end - right:
            next_start, alpha = left, next_alpha
        else:
            next_end, beta = right, next_beta
        if (next_start, next_end) == (start, end):
            continue
        norm = quantization_error(hist, bin_width, next_start, next_end, dst_bins)
        if norm > best:
            break
        best, start, end = norm, next_start, next_end
    return start, end
