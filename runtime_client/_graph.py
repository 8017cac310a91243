"""StateGraph: async nodes over a shared state, static edges, conditional routers.

A node is ``async def node(state) -> NodeResult | None``; it may change ``state`` in place.
Returning ``Failed(...)`` or ``Rejected(...)`` stops the graph early. ``a >> b >> c`` on
``Node``s (or ``AgentRun``s) builds a linear graph.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Union

END = "__end__"


@dataclass(frozen=True, slots=True)
class Failed:
    reason: str


@dataclass(frozen=True, slots=True)
class Rejected:
    reason: str


NodeResult = Union[Failed, Rejected, None]
NodeFn = Callable[[Any], Awaitable[NodeResult] | NodeResult]
Router = Callable[[Any], str]


@dataclass(frozen=True, slots=True)
class GraphResult:
    state: Any
    visited: tuple[str, ...]
    status: str  # completed | failed | rejected
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "completed"


class Node:
    """A named step; ``>>`` chains nodes into a linear ``StateGraph``."""

    def __init__(self, fn: NodeFn, name: str | None = None) -> None:
        self.fn = fn
        self.name = name or getattr(fn, "__name__", type(fn).__name__)

    async def __call__(self, state: Any) -> NodeResult:
        out = self.fn(state)
        return await out if inspect.isawaitable(out) else out

    def __rshift__(self, other: Node | NodeFn) -> StateGraph:
        return StateGraph.chain(self) >> other


def _as_node(item: Node | NodeFn) -> Node:
    return item if isinstance(item, Node) else Node(item)


@dataclass
class StateGraph:
    nodes: dict[str, Node] = field(default_factory=dict)
    edges: dict[str, str] = field(default_factory=dict)
    routers: dict[str, tuple[Router, dict[str, str]]] = field(default_factory=dict)
    entry: str | None = None
    max_visits: int = 100
    """A bound on node executions, so a cyclic graph cannot run forever."""

    def add_node(self, node: Node | NodeFn, name: str | None = None) -> StateGraph:
        n = _as_node(node) if name is None else Node(node if not isinstance(node, Node) else node.fn, name)
        if n.name in self.nodes or n.name == END:
            raise ValueError(f"duplicate or reserved node name {n.name!r}")
        self.nodes[n.name] = n
        return self

    def add_edge(self, source: str, target: str) -> StateGraph:
        self._check(source, target)
        self.edges[source] = target
        return self

    def add_conditional_edges(self, source: str, router: Router,
                              routes: dict[str, str] | None = None) -> StateGraph:
        """``router(state)`` returns a key of ``routes`` (or a node name when routes is None)."""
        targets = routes or {n: n for n in self.nodes}
        self._check(source, *targets.values())
        self.routers[source] = (router, targets)
        return self

    def set_entry_point(self, name: str) -> StateGraph:
        self._check(name)
        self.entry = name
        return self

    def _check(self, *names: str) -> None:
        for n in names:
            if n != END and n not in self.nodes:
                raise ValueError(f"unknown node {n!r}")

    @classmethod
    def chain(cls, first: Node | NodeFn) -> StateGraph:
        graph = cls().add_node(first)
        graph.entry = _as_node(first).name if not isinstance(first, Node) else first.name
        return graph

    def __rshift__(self, other: Node | NodeFn) -> StateGraph:
        node = _as_node(other)
        last = self._last()
        self.add_node(node)
        return self.add_edge(last, node.name)

    def _last(self) -> str:
        name = self.entry
        while name in self.edges:
            name = self.edges[name]
        if name is None:
            raise ValueError("graph has no entry point")
        return name

    def _next(self, name: str, state: Any) -> str:
        if name in self.routers:
            router, routes = self.routers[name]
            key = router(state)
            if key not in routes:
                raise ValueError(f"router of {name!r} returned unknown route {key!r}")
            return routes[key]
        return self.edges.get(name, END)

    async def run(self, state: Any) -> GraphResult:
        if self.entry is None:
            raise ValueError("set_entry_point() first")
        visited: list[str] = []
        name = self.entry
        while name != END:
            if len(visited) >= self.max_visits:
                return GraphResult(state, tuple(visited), "failed", "max_visits exceeded")
            visited.append(name)
            outcome = await self.nodes[name](state)
            if isinstance(outcome, Failed):
                return GraphResult(state, tuple(visited), "failed", outcome.reason)
            if isinstance(outcome, Rejected):
                return GraphResult(state, tuple(visited), "rejected", outcome.reason)
            name = self._next(name, state)
        return GraphResult(state, tuple(visited), "completed")
