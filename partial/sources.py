"""Where a compiled entry's inputs come from and where its outputs go, as tags in the tuples a
capture describes them with: `(REF, weakref)` a tensor read afresh, `(GRAD, owner weakref)` the
current `.grad` of a tensor, `(HYPER, optimizer weakref, group, key, element)` a hyper-parameter;
outputs go to `(ARG, i)` a Tensor argument, `(RESULT, i)` a program output, `(CONST, v)` a
plain value, `(GRAD_DATA, owner)` the storage of a `.grad`, `(ATTR, module, name)` a module
attribute."""

# Where an input's value comes from at call time (beyond the Tensor arguments).
REF, GRAD, HYPER = "ref", "grad", "hyper"
# Where an output goes after the call.
ARG, RESULT, CONST = "arg", "result", "const"
GRAD_DATA, ATTR = "grad data", "attr"
