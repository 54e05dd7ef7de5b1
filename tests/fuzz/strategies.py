"""Inputs for the parser fuzz tests: arbitrary text, and text near the formats parsed.

Purely random text rarely gets past a parser's first check, so each strategy mixes it
with mutations of real inputs (a real value with junk spliced in, huge numbers, odd
digits and spaces), where the interesting failures are.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# Bounded so the suite stays fast; deadline off: the first example pays for imports.
FUZZ = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# Characters that trip parsers: non-ASCII digits int() accepts, unicode spaces, NUL,
# the replacement character a lossy decode leaves, signs, separators.
_TRICKY = "0123456789 \t\n\r\x00\x0b\x0c\u00a0\u2007\u3000١٢३\uff10\ufffd+-_.,:;@=/()[]{}*&#!%"

tricky_text = st.text(alphabet=_TRICKY, max_size=40)

huge_numbers = st.one_of(
    st.integers(min_value=-(2**130), max_value=2**130).map(str),
    st.integers(min_value=1, max_value=6000).map(lambda n: "9" * n),
    st.integers(min_value=1, max_value=6000).map(lambda n: "0" * n + "1"),
)


def near(examples: list[str]) -> st.SearchStrategy[str]:
    """Real inputs, random text, and real inputs with random text spliced in."""
    real = st.sampled_from(examples)
    junk = st.one_of(st.text(max_size=60), tricky_text, huge_numbers)

    @st.composite
    def spliced(draw: st.DrawFn) -> str:
        base = draw(real)
        at = draw(st.integers(min_value=0, max_value=len(base)))
        cut = draw(st.integers(min_value=at, max_value=len(base)))
        return base[:at] + draw(junk) + base[cut:]

    return st.one_of(real, junk, spliced())
