"""Hypothesis strategies shared by the fuzz tests: arbitrary JSON, and text that looks enough
like what our parsers expect to get past their first checks."""
from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.integers(min_value=10**300, max_value=10**400),  # ints that do not fit a float
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
)
json_values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=5), st.dictionaries(st.text(max_size=12), children, max_size=5)
    ),
    max_leaves=25,
)


def dumps(value: Any) -> str:
    """JSON text, with NaN/Infinity as Python writes them (our parsers meet that too)."""
    return json.dumps(value, allow_nan=True)


def deep(depth: int, opener: str = "[") -> str:
    """Nesting deeper than the interpreter's recursion limit."""
    closer = {"[": "]", "{": "}"}[opener]
    inner = '{"a":' * depth + "1" + "}" * depth if opener == "{" else opener * depth + closer * depth
    return inner
