"""Every source declares itself once: what the CLI, the registry, the exposition and the
catalogue know of it.

A declaration lives beside its source (`agent/sources/nvml/declaration.py`,
`agent/sources/host_declaration.py`, ...) and says the source's name, whether `--sources`
selects it and whether it is on by default, how it is built from the config, which
sample type it returns and which renderer turns that into families, and which catalogue
scopes those families have. `--sources`' help and check, build_sources, the renderer
lookup and the catalogue's SOURCE_OF all read the declarations, so a source is added in
one place (docs/architecture.md says how) and the four can no longer disagree.

Importing a declaration loads none of its source: every command reads the declarations
(the help of --sources), and a node's agent must not pay for what it does not poll. So a
factory imports its source when called, and the sample type and the renderer are named
as "module:attribute" text, imported by the poll that renders them.

Built-in sources are listed here by module; another (a test's toy source, a site's own)
is added with `register` and removed with `unregister`, the way node_exporter registers
each collector once by name.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from nvwatch.agent.catalogue import MetricSpec
    from nvwatch.agent.config import AgentConfig
    from nvwatch.agent.sources import Source

T = TypeVar("T")

# the built-in declarations, each a module's DECLARATION, in the order they are built
# (nvml before infiniband, which asks it for the GPUs' bus ids) and listed in --sources
_BUILT_IN = (
    "nvwatch.agent.sources.nvml.declaration",
    "nvwatch.agent.sources.infiniband_declaration",
    "nvwatch.agent.sources.host_declaration",
    "nvwatch.agent.sources.scheduler.declaration",
    "nvwatch.agent.sources.attribution.declaration",
    "nvwatch.agent.sources.bmc.declaration",
)
# the poller's own families (agent and per-source health) are no source's
AGENT = "agent"


@dataclass
class BuildContext:
    """What a factory may use beside the config: the sources built before it, in
    declaration order, and what several sources share (one attribution refresher feeds
    both the nvml and the attribution source)."""

    # replaces a source's monotonic clock: a simulated fleet passes its simulated time
    clock: Callable[[], float] | None = None
    built: dict[str, Source] = field(default_factory=dict)
    _shared: dict[str, Any] = field(default_factory=dict)

    def shared(self, key: str, make: Callable[[], T]) -> T:
        """The one object under `key`, made by the first source that asks for it."""
        if key not in self._shared:
            self._shared[key] = make()
        found: T = self._shared[key]
        return found


Factory = Callable[["AgentConfig", BuildContext], "Source"]


@dataclass(frozen=True, eq=False)
class SourceDeclaration:
    """One source, as everything outside its own package needs to know it."""

    # the name in --sources and in nvwatch_agent_*{source=...}; its Source's `name`
    name: str
    # the catalogue scopes its sample fills (agent/catalogue.py Scope, or its own below)
    scopes: tuple[str, ...]
    # builds the source from the config; None: the poller never polls it (bmc is read
    # at scrape time by /probe)
    factory: Factory | None = None
    # "module:attribute" of the sample class its collect() returns, and of the function
    # that renders one into families: render(sample, FamilySet) -> None
    sample: str | None = None
    renderer: str | None = None
    # --sources selects it; `default`: it is polled when --sources is not given
    selectable: bool = True
    default: bool = False
    # a source --sources does not select: whether the config turns it on
    enabled_by: Callable[[AgentConfig], bool] | None = None
    # what --sources' help says of it beyond its name ("" : nothing)
    note: str = ""
    # A source the built-in catalogue does not know (a plug-in) brings its families and
    # the identity labels of its own scopes; a built-in's are in agent/catalogue.py.
    metrics: tuple[MetricSpec, ...] = ()
    identity: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def wanted(self, config: AgentConfig) -> bool:
        """Whether `config` polls this source."""
        if self.factory is None:
            return False
        if self.selectable:
            return self.name in config.sources
        return self.enabled_by is not None and self.enabled_by(config)


def load(target: str) -> Any:
    """'package.module:attribute' -> the attribute. After the first time the import is a
    sys.modules lookup, so callers keep no cache of their own."""
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


class _Registry:
    """The built-in declarations (imported on first use) and the registered ones, with
    the lookups made from them, rebuilt whole when a source is added or removed (a
    reader on another thread sees the old tables or the new, never half of one)."""

    def __init__(self) -> None:
        self._built_in: tuple[SourceDeclaration, ...] | None = None
        self._added: dict[str, SourceDeclaration] = {}
        self._tables: _Tables | None = None

    def tables(self) -> _Tables:
        tables = self._tables
        if tables is None:
            if self._built_in is None:
                self._built_in = tuple(load(f"{m}:DECLARATION") for m in _BUILT_IN)
            tables = self._tables = _Tables((*self._built_in, *self._added.values()))
        return tables

    def add(self, declaration: SourceDeclaration) -> None:
        _check(declaration, self.tables())
        self._added[declaration.name] = declaration
        self._tables = None

    def remove(self, name: str) -> None:
        if name not in self._added:
            raise KeyError(f"no registered source {name!r}")
        del self._added[name]
        self._tables = None


class _Tables:
    """What the readers of declarations look up, made once per set of declarations."""

    def __init__(self, every: tuple[SourceDeclaration, ...]) -> None:
        self.every = every
        self.by_name = {d.name: d for d in every}
        self.by_scope = {scope: d for d in every for scope in d.scopes}
        self.metrics = tuple(m for d in every for m in d.metrics)


_REGISTRY = _Registry()


def declarations() -> tuple[SourceDeclaration, ...]:
    """Every declared source: the built-ins, then the registered ones in their order."""
    return _REGISTRY.tables().every


def declared(name: str) -> SourceDeclaration:
    """The declaration of source `name`; KeyError for a name no source declares."""
    return _REGISTRY.tables().by_name[name]


def selectable_sources() -> tuple[str, ...]:
    """What --sources accepts, in declaration order."""
    return tuple(d.name for d in declarations() if d.selectable)


def default_sources() -> tuple[str, ...]:
    """What an agent polls when --sources is not given."""
    return tuple(d.name for d in declarations() if d.selectable and d.default)


def scope_sources() -> dict[str, str]:
    """Catalogue scope -> the source whose sample holds it (the catalogue adds the
    poller's own scopes)."""
    return {scope: d.name for scope, d in _REGISTRY.tables().by_scope.items()}


def declared_identity(scope: str) -> tuple[str, ...]:
    """The identity labels a registered source declares for its own scope `scope`;
    KeyError for a scope no declaration gives them."""
    return _REGISTRY.tables().by_scope[scope].identity[scope]


def declared_metrics() -> tuple[MetricSpec, ...]:
    """The families registered sources bring beside the built-in catalogue."""
    return _REGISTRY.tables().metrics


def register(declaration: SourceDeclaration) -> SourceDeclaration:
    """Add a source beside the built-in ones (and return it); ValueError when its name,
    a scope or a family's name is taken, a scope of its own has no identity labels, or a
    family's scope is not one of its own."""
    _REGISTRY.add(declaration)
    return declaration


def unregister(name: str) -> None:
    """Remove a source `register` added (a test's own, when the test ends)."""
    _REGISTRY.remove(name)


def _check(new: SourceDeclaration, known: _Tables) -> None:
    from nvwatch.agent.catalogue import BY_NAME, IDENTITY

    if new.name == AGENT or new.name in known.by_name:
        raise ValueError(f"source {new.name!r} is declared already")
    for scope in new.scopes:
        # the built-in scopes (the poller's own among them) are all taken
        if scope in IDENTITY or scope in known.by_scope:
            raise ValueError(f"source {new.name!r}: scope {_text(scope)!r} is another source's")
        if scope not in new.identity:
            raise ValueError(f"source {new.name!r}: scope {_text(scope)!r} has no identity labels")
    names = set(BY_NAME) | {m.name for m in known.metrics}
    for metric in new.metrics:
        if metric.scope not in new.scopes:
            raise ValueError(f"{metric.name}: scope {_text(metric.scope)!r} is not {new.name!r}'s")
        if metric.name in names:
            raise ValueError(f"{metric.name}: the catalogue has a family of that name")
        names.add(metric.name)


def _text(scope: str) -> str:
    """A scope as written: str() of a Scope member is 'Scope.GPU', its text 'gpu'."""
    return str.__str__(scope)
