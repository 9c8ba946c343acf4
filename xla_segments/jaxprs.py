"""Walking jaxprs: what the jaxpr rewrites of a segment (`layout`, `residuals`) share."""

from __future__ import annotations

from typing import Any

# Primitives that call a jaxpr of the same inputs and outputs (jnp's functions and the ops are
# such calls): a rewrite may look into them or inline them.
CALLS = frozenset({"jit", "pjit", "closed_call", "core_call"})


def uses(jaxpr: Any, primitive: str) -> bool:
    """Whether `jaxpr` (a Jaxpr or ClosedJaxpr) binds `primitive` anywhere, nested jaxprs
    included."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == primitive:
            return True
        if any(uses(sub, primitive) for sub in subjaxprs(eqn.params)):
            return True
    return False


def subjaxprs(params: dict) -> list:
    """The jaxprs among an equation's parameters (a call's body, a loop's, a branch's)."""
    found = []
    for value in params.values():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            if hasattr(item, "eqns") or hasattr(getattr(item, "jaxpr", None), "eqns"):
                found.append(item)
    return found
