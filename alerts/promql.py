"""Metric names used by a PromQL expression, found with a small tokenizer.

promtool checks syntax; this answers the other question the mixin's tests ask: does an
expression only read metrics the catalogue defines (or our own recording rules)? It
skips strings, label matchers, range/subquery brackets, durations and numbers, function
and aggregation names, keywords, Grafana `$variables`, and the label lists of
by/without/on/ignoring/group_left/group_right.
"""

from __future__ import annotations

import re

_TOKEN = re.compile(
    r"""
    (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<variable>\$\{?\w+\}?)
  | (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?(?:[A-Za-z]\w*)?)
  | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<open>[({\[])
  | (?P<close>[)}\]])
  | (?P<other>[^\s])
    """,
    re.VERBOSE,
)

KEYWORDS = frozenset(
    {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
     "group_right", "bool", "offset", "atan2", "inf", "nan", "start", "end"}
)  # fmt: skip
AGGREGATIONS = frozenset(
    {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
     "bottomk", "topk", "quantile", "limitk", "limit_ratio"}
)  # fmt: skip
_LABEL_LIST = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})


def _tokens(expr: str) -> list[tuple[str, str]]:
    return [(m.lastgroup or "", m.group()) for m in _TOKEN.finditer(expr)]


def _skip_group(tokens: list[tuple[str, str]], start: int) -> int:
    """Index after the bracket group opening at `start`."""
    depth = 0
    for i in range(start, len(tokens)):
        kind = tokens[i][0]
        if kind == "open":
            depth += 1
        elif kind == "close":
            depth -= 1
            if depth == 0:
                return i + 1
    raise ValueError(f"unbalanced brackets from token {start}")


def metric_names(expr: str) -> set[str]:
    """Every metric name selected by `expr`, bare or as `__name__="..."` in a matcher."""
    tokens = _tokens(expr)
    names: set[str] = set()
    i = 0
    while i < len(tokens):
        kind, text = tokens[i]
        nxt = tokens[i + 1] if i + 1 < len(tokens) else ("", "")
        if kind == "open" and text in "{[":
            if text == "{":
                names.update(_name_matchers(tokens, i))
            i = _skip_group(tokens, i)
            continue
        if kind == "ident":
            word = text.lower()
            if word in _LABEL_LIST:
                i += 1
                if i < len(tokens) and tokens[i] == ("open", "("):
                    i = _skip_group(tokens, i)
                continue
            # `sum by (x) (...)`: the aggregation's name comes before its label list
            aggregation = word in AGGREGATIONS and nxt[1].lower() in ("by", "without")
            if word in KEYWORDS or nxt == ("open", "(") or aggregation:
                i += 1
                continue
            names.add(text)
        i += 1
    return names


def _name_matchers(tokens: list[tuple[str, str]], start: int) -> set[str]:
    """`{__name__="x"}` selects metric x too."""
    end = _skip_group(tokens, start)
    inner = tokens[start + 1 : end - 1]
    found = set()
    for j in range(len(inner) - 2):
        if inner[j] == ("ident", "__name__") and inner[j + 1] == ("other", "="):
            kind, text = inner[j + 2]
            if kind == "string":
                found.add(text[1:-1])
    return found


def _label_list(tokens: list[tuple[str, str]], start: int) -> tuple[set[str], int]:
    """The labels of a `(a, b)` list opening at `start`, and the index after it."""
    end = _skip_group(tokens, start)
    return {text for kind, text in tokens[start + 1 : end - 1] if kind == "ident"}, end


def _grouping(tokens: list[tuple[str, str]], i: int) -> tuple[str, set[str], int] | None:
    """`by (...)` / `without (...)` at token i: (clause, labels, index after) or None."""
    clause = tokens[i][1].lower() if i < len(tokens) else ""
    if clause in ("by", "without") and i + 1 < len(tokens) and tokens[i + 1] == ("open", "("):
        labels, end = _label_list(tokens, i + 1)
        return clause, labels, end
    return None


def cross_aggregated_names(expr: str, keep: str) -> set[str]:
    """Metric names that `expr` aggregates away the label `keep` from.

    An aggregation (sum, count, topk, ...) whose `by` list lacks `keep`, or whose
    `without` list names it, or that has neither, folds series of different `keep`
    values together: with keep="instance" that is a cross-node aggregate, the work a
    recording rule should do once rather than every dashboard refresh.
    """
    tokens = _tokens(expr)
    found: set[str] = set()
    for i, (kind, text) in enumerate(tokens):
        if kind != "ident" or text.lower() not in AGGREGATIONS:
            continue
        before = _grouping(tokens, i + 1)
        arg_start = before[2] if before else i + 1
        if arg_start >= len(tokens) or tokens[arg_start] != ("open", "("):
            continue
        arg_end = _skip_group(tokens, arg_start)
        clause = before or _grouping(tokens, arg_end)
        keeps = clause is not None and (
            keep in clause[1] if clause[0] == "by" else keep not in clause[1]
        )
        if not keeps:
            found |= metric_names("".join(f" {t}" for _, t in tokens[arg_start + 1 : arg_end - 1]))
    return found
