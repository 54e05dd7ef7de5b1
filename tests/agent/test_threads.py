"""The one thread helper: it carries the context, and nothing else in the agent starts one,
nor in the capacity report, which runs its queries on the helper's pool."""

from __future__ import annotations

import ast
import contextvars
from pathlib import Path

from nvwatch import agent, report
from nvwatch.agent import threads
from nvwatch.agent.threads import start_thread

AGENT = Path(agent.__file__).parent
REPORT = Path(report.__file__).parent
_node: contextvars.ContextVar[str] = contextvars.ContextVar("node", default="none")


def _seen_by_thread(context: contextvars.Context | None) -> str:
    seen: list[str] = []
    start_thread("test", lambda: seen.append(_node.get()), daemon=True, context=context).join(5)
    return seen[0]


def test_a_thread_sees_its_starters_context_or_the_one_given() -> None:
    token = _node.set("dgx-001")
    try:
        captured = contextvars.copy_context()
        assert _seen_by_thread(None) == "dgx-001"
        _node.set("dgx-002")
        assert _seen_by_thread(None) == "dgx-002"
        assert _seen_by_thread(captured) == "dgx-001"
    finally:
        _node.reset(token)


def _calls(tree: ast.AST) -> list[ast.Call]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)]


def _called_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def test_only_the_helper_starts_threads_and_its_docstring_lists_every_one() -> None:
    names: set[str] = set()
    for path in [*AGENT.rglob("*.py"), *REPORT.rglob("*.py")]:
        tree = ast.parse(path.read_text(), str(path))
        for call in _calls(tree):
            called = _called_name(call)
            if path.name != "threads.py":
                assert called not in ("Thread", "ThreadPoolExecutor", "Timer"), (
                    f"{path.relative_to(AGENT.parent)}:{call.lineno} starts a thread "
                    "without nvwatch.agent.threads.start_thread"
                )
            if called in ("start_thread", "thread_pool") and call.args:
                first = call.args[0]
                if isinstance(first, ast.Constant):
                    names.add(str(first.value))
                elif isinstance(first, ast.JoinedStr) and isinstance(first.values[0], ast.Constant):
                    names.add(str(first.values[0].value) + "<name>")
    assert {"nvwatch-poller", "nvwatch-http", "nvwatch-xid", "nvwatch-report"} <= names
    doc = threads.__doc__ or ""
    assert [name for name in sorted(names) if f"``{name}``" not in doc] == []
