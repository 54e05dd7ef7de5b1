"""The one YAML loader of every file the agent reads: --config, --web-config, the mixin
config and the cluster inventory, and `shown()`, the one way an error shows a value.

A config file is a page of plain values. PyYAML's SafeLoader builds only plain values,
but takes things a mistaken or hostile file can turn against the agent at start-up:

- aliases: a 1 KB web config of aliases to aliases took 25 s and 2.2 GB, most of it
  spent printing the expanded value in an error message;
- nesting: its composer recurses once per level, so 50,000 '[' ended in a RecursionError
  traceback, and recursion is no bound to rely on anyway;
- integers: int() refuses 4,300 digits with a ValueError of its own (a traceback from
  --config), and a long base-60 integer (1:2:3:...) is quadratic work to build;
- constructors: a timestamp with month 13, or `!!int x`, raise ValueError and friends,
  not YAMLError;
- duplicate keys: the last one wins, silently (a user listed twice in a web config
  logged in with the second hash), where Go's yaml.v2 refuses them.

So `load_yaml_text` refuses aliases (anchors are then harmless), nesting deeper than
MAX_DEPTH (counted as the composer goes, so a megabyte of '[' is refused at the 33rd),
integers of more than MAX_INT_DIGITS digits and a key given twice in one mapping, and
turns every problem into one ConfigError line naming the file, the key path where there
is one, and the position.
"""

from __future__ import annotations

import reprlib
from pathlib import Path
from typing import Any, Protocol

import yaml

from nvwatch.common.regular_files import read_regular

# Levels of lists and mappings one file may nest: every config here needs three or four.
MAX_DEPTH = 32
# Digits of one integer: 30 is past any count, port, byte size or seed a config holds,
# and far below int()'s own limit of 4,300.
MAX_INT_DIGITS = 30
# A config file is a page of option: value lines (a web config a few users and paths);
# a megabyte is far more than any real one and far less than what hurts (a 52 MB YAML
# list took minutes and gigabytes to load).
MAX_CONFIG_BYTES = 1 << 20
# Characters of a value an error message shows (see `shown`).
SHOWN_CHARS = 60

_INT_TAG = "tag:yaml.org,2002:int"
_TAG_PREFIX = "tag:yaml.org,2002:"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_VALUE_TAG = "tag:yaml.org,2002:value"
_STR_TAG = "tag:yaml.org,2002:str"


class ConfigError(ValueError):
    """Bad input from a flag, the environment or a config file; the message is one line.

    Defined here, beside the loader that raises it most, and re-exported by
    agent/config.py, where every other parser raises it too.
    """


def shown(value: object) -> str:
    """`value` as an error message may show it: its repr, cut to about SHOWN_CHARS
    characters with an ellipsis and its size when longer.

    One line (repr escapes newlines and control characters) whatever the value, and
    never built whole: a megabyte string, a list of a million items or a huge integer
    costs what its first few items cost.
    """
    if isinstance(value, (str, bytes)):
        text = repr(value[: SHOWN_CHARS + 1])
        if len(value) <= SHOWN_CHARS and len(text) <= SHOWN_CHARS + 3:
            return text
        unit = "characters" if isinstance(value, str) else "bytes"
        return f"{text[:SHOWN_CHARS]}… ({len(value):,} {unit})"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**SHOWN_CHARS:
        # repr() of an int past 4,300 digits raises; its size says enough anyway
        return f"an integer of about {int(abs(value).bit_length() * 0.30103):,} digits"
    text = _REPR.repr(value)
    if len(text) <= SHOWN_CHARS and "..." not in text:
        return text
    if isinstance(value, (list, tuple, dict, set)):
        count = len(value)
        return f"{text[:SHOWN_CHARS]}… ({count:,} item{'' if count == 1 else 's'})"
    return f"{text[:SHOWN_CHARS]}…"


def _bounded_repr() -> reprlib.Repr:
    # attributes, not keyword arguments: Repr() takes none before Python 3.12
    bounded = reprlib.Repr()
    bounded.maxlevel = 3
    bounded.maxstring = bounded.maxother = bounded.maxlong = SHOWN_CHARS
    bounded.maxlist = bounded.maxtuple = bounded.maxdict = bounded.maxset = 6
    return bounded


_REPR = _bounded_repr()


def key_text(key: object) -> str:
    """One key of a key path in an error: as written when short and printable, else shown."""
    if isinstance(key, str) and key and key.isprintable() and len(key) <= SHOWN_CHARS:
        return key
    return shown(key)


def read_config_text(path: Path, what: str = "config file", limit: int = MAX_CONFIG_BYTES) -> str:
    """The text of a config file of kind `what`, for any loader (agent, web config).

    ConfigError, one line naming the file, when it is not a regular file (a FIFO would
    hang the start-up, a device never end: so `--config <(generate-config)` is refused
    too; write the file first), cannot be read, is over `limit` bytes, or is not UTF-8.
    """
    try:
        data = read_regular(path, limit)
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror or exc}") from exc
    if len(data) > limit:
        raise ConfigError(f"{what} {path} is larger than the limit of {limit:,} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{what} {path} is not UTF-8 text (byte {exc.start}): is it a binary file?"
        ) from exc
    if "\x00" in text:
        raise ConfigError(f"{what} {path} contains NUL bytes: is it a binary file?")
    return text


def load_yaml_text(text: str, path: Path, what: str = "config file") -> Any:
    """Parse `text` (read from `path`) as YAML: plain values only, no aliases, at most
    MAX_DEPTH levels, integers of at most MAX_INT_DIGITS digits. ConfigError, one line
    naming the file (and the key path where there is one), on anything else."""
    try:
        return _load(text)
    except _Refused as exc:
        # a path 32 levels deep of 60-character keys is still one line, but not a short one
        where = f"{_one_line(exc.key_path, 120)}: " if exc.key_path else ""
        raise ConfigError(f"{what} {path}: {where}{exc.problem}{_position(exc.mark)}") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = _one_line(str(exc.problem or exc.context or "syntax error"))
        raise ConfigError(f"{what} {path} is not valid YAML{where}: {problem}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{what} {path} is not valid YAML: {_one_line(str(exc))}") from None


def _load(text: str) -> Any:
    loader = _Loader(text)  # its reader refuses control characters here already
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def _one_line(text: str, limit: int = 200) -> str:
    """PyYAML's message on one line, bounded: a problem may quote a tag or a token whole."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else f"{flat[:limit]}… ({len(flat):,} characters)"


class _Mark(Protocol):
    """Where in the text: PyYAML's pure and C implementations each have a Mark class."""

    line: int
    column: int


def _position(mark: _Mark | None) -> str:
    return f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""


class _Refused(yaml.YAMLError):
    """What this loader refuses, where PyYAML would have gone on (or crashed)."""

    def __init__(self, problem: str, mark: _Mark | None, key_path: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.mark = mark
        self.key_path = key_path


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses aliases, deep nesting and long integers as it composes,
    and knows the key path of the node it is at for its error messages."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._keys: list[str | int] = []  # the key path of the node composed: keys, indexes
        self._depth = 0  # lists and mappings open around it
        # the key path of every node composed, by id (the nodes live until the load
        # ends): a constructor fails after composition, when the path is gone
        self._paths: dict[int, str] = {}

    def key_path(self) -> str:
        """'rate_limit.burst', 'sources[2]': where the node being composed sits."""
        path = ""
        for part in self._keys:
            path = _joined(path, part)
        return path

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        part = _key_part(parent, index)
        if part is not None:
            self._keys.append(part)
        try:
            event: yaml.Event = self.peek_event()  # type: ignore[no-untyped-call]
            if isinstance(event, yaml.AliasEvent):
                raise self._refused("aliases (*name) are not allowed", event.start_mark)
            opens = isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent))
            if opens:
                if self._depth >= MAX_DEPTH:
                    raise self._refused(
                        f"nested too deeply: more than {MAX_DEPTH} levels of lists and mappings",
                        event.start_mark,
                    )
                self._depth += 1
            try:
                node = super().compose_node(parent, index)
            finally:
                if opens:
                    self._depth -= 1
            if node is not None:
                self._paths[id(node)] = self.key_path()
            return node
        finally:
            if part is not None:
                self._keys.pop()

    def compose_scalar_node(self, anchor: Any) -> yaml.ScalarNode:
        node = super().compose_scalar_node(anchor)
        if node.tag == _INT_TAG and _int_digits(node.value) > MAX_INT_DIGITS:
            raise self._refused(
                f"an integer of {_int_digits(node.value):,} digits (at most {MAX_INT_DIGITS})",
                node.start_mark,
            )
        return node

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError):
            # a scalar its tag's constructor cannot read: '2001-13-45', `!!int x`
            tag = node.tag.replace(_TAG_PREFIX, "!!")
            raise _Refused(
                f"{shown(node.value)} is not a valid {key_text(tag)}",
                node.start_mark,
                self._paths.get(id(node), ""),
            ) from None

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        """The mapping's own pairs after those of its merge key (`<<`), every one of them
        kept: PyYAML's own flattening drops a merged key it has seen, by the identity of
        its text (so some duplicates, not all), and construct_mapping must see them all."""
        merge_key: yaml.Node | None = None
        merged: list[tuple[yaml.Node, yaml.Node]] = []
        own: list[tuple[yaml.Node, yaml.Node]] = []
        for key_node, value_node in node.value:
            if key_node.tag != _MERGE_TAG:
                if key_node.tag == _VALUE_TAG:  # YAML's `=` key is plain text here
                    key_node.tag = _STR_TAG
                own.append((key_node, value_node))
                continue
            if merge_key is not None:  # a key given twice like any other
                raise self._duplicate(node, merge_key, key_node)
            merge_key = key_node
            for source in _merge_sources(node, value_node):
                self.flatten_mapping(source)
                merged += source.value
        node.value = merged + own

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        """A mapping whose keys are all different once read: a key given twice (at any
        depth, through a merge or not, or spelt twice: `1` and `0x1`, `yes` and `true`)
        is refused, where PyYAML keeps the last and Go's yaml.v2 (UnmarshalStrict, as
        exporter-toolkit reads a web config) refuses it too."""
        if not isinstance(node, yaml.MappingNode):  # `!!set x`: PyYAML's error says so
            return super().construct_mapping(node, deep)
        self.flatten_mapping(node)  # merged keys count: they are the mapping's keys
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                first = seen.setdefault(key, key_node)
            except TypeError:
                continue  # unhashable: PyYAML's own error says so next
            if first is not key_node:
                raise self._duplicate(node, first, key_node)
        return super().construct_mapping(node, deep)

    def _duplicate(self, mapping: yaml.Node, first: yaml.Node, again: yaml.Node) -> _Refused:
        where = _joined(self._paths.get(id(mapping), ""), _key_part(mapping, again))
        columns = first.start_mark.line == again.start_mark.line
        problem = f"duplicate key, {_at(first, columns)} and again {_at(again, columns)}"
        if isinstance(first, yaml.ScalarNode) and first.value != again.value:
            problem += f" ({shown(first.value)} and {shown(again.value)} are the same key)"
        return _Refused(problem, None, where)

    def _refused(self, problem: str, mark: _Mark | None) -> _Refused:
        return _Refused(problem, mark, self.key_path())


def _at(node: yaml.Node, columns: bool) -> str:
    """'on line 3', or 'on line 3, column 5' where both keys are on one line."""
    mark = node.start_mark
    return f"on line {mark.line + 1}" + (f", column {mark.column + 1}" if columns else "")


def _merge_sources(node: yaml.Node, value: yaml.Node) -> list[yaml.MappingNode]:
    """The mappings a merge key's value names: one mapping, or a list of them."""
    items: list[yaml.Node] = value.value if isinstance(value, yaml.SequenceNode) else [value]
    sources = [item for item in items if isinstance(item, yaml.MappingNode)]
    if len(sources) < len(items):
        wrong = next(item for item in items if not isinstance(item, yaml.MappingNode))
        raise yaml.constructor.ConstructorError(
            "while constructing a mapping",
            node.start_mark,
            "expected a mapping or a list of mappings for merging, found "
            f"{type(wrong).__name__.removesuffix('Node').lower()}",
            wrong.start_mark,
        )
    return sources


def _joined(path: str, part: str | int | None) -> str:
    """`path` with one more part, written as key_path writes it."""
    if part is None:
        return path
    if isinstance(part, int):
        return f"{path}[{part}]"
    return f"{path}.{part}" if path else part


def _key_part(parent: yaml.Node | None, index: Any) -> str | int | None:
    """The part a child adds to the key path: its key in a mapping, its index in a list."""
    if isinstance(parent, yaml.SequenceNode) and isinstance(index, int):
        return index
    if isinstance(parent, yaml.MappingNode) and isinstance(index, yaml.Node):
        return key_text(index.value) if isinstance(index, yaml.ScalarNode) else "(a complex key)"
    return None  # the root, or a mapping's key itself (its path is the mapping's)


def _int_digits(text: str) -> int:
    """The digits of a YAML 1.1 integer: no sign, '_', base prefix or base-60 ':'."""
    body = text.lstrip("+-").replace("_", "").replace(":", "")
    return len(body) - 2 if body[:2].lower() in ("0x", "0b", "0o") else len(body)
