"""The key of a lazily recorded stretch depends on the ops and the arrays they read, not on
where Python happened to allocate the tensors that read them."""

import eager as eg
from partial.lazy import LazyRun, Stretch


def test_an_array_read_without_gradient_has_one_input_slot_whichever_tensor_reads_it():
    """Two tensors over one array (a parameter and its `detach()`) read where no gradient
    flows are one input. Keyed by the reading tensor's id, they were one input on steps where
    the second tensor reused the address of the first (dead) one and two on others: FCOS's
    lazily run forward compiled a stretch again on every step, or not, with the collector's
    timing."""
    w = eg.tensor([1.0, 2.0, 3.0])
    array = eg.hooks.data(w)
    st = Stretch(("test", None, 0))
    first, needs_first = LazyRun._tensor_input(st, w, array)
    second, needs_second = LazyRun._tensor_input(st, w.detach(), array)
    assert (first, needs_first) == (second, needs_second) == (0, False)
    assert len(st.inputs) == 1
