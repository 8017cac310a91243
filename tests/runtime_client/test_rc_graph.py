"""StateGraph: conditional routing, early stop, and `>>` pipelines of agent runs."""

from __future__ import annotations

import pytest

from runtime_client import END, AgentRun, Answer, Failed, Node, Rejected, StateGraph, ToolCall
from runtime_client.testing import scripted_decide


def _risk_graph() -> StateGraph:
    async def classify(state):
        state["risk"] = "low" if state["amount"] < 50 else "medium" if state["amount"] < 500 else "high"

    def handler(name):
        async def node(state):
            state["handled_by"] = name
        node.__name__ = name
        return node

    g = StateGraph().add_node(classify)
    for name in ("auto_refund", "ask_manager", "escalate"):
        g.add_node(handler(name)).add_edge(name, END)
    g.add_conditional_edges("classify", lambda s: s["risk"],
                            {"low": "auto_refund", "medium": "ask_manager", "high": "escalate"})
    return g.set_entry_point("classify")


@pytest.mark.parametrize("amount,expected", [(10, "auto_refund"), (100, "ask_manager"), (900, "escalate")])
async def test_conditional_router_picks_one_of_three_nodes(amount, expected):
    result = await _risk_graph().run({"amount": amount})
    assert result.ok
    assert result.visited == ("classify", expected)
    assert result.state["handled_by"] == expected


async def test_failed_node_stops_graph_early():
    seen = []
    a = Node(lambda s: seen.append("a"), "a")
    b = Node(lambda s: Failed("nope"), "b")
    c = Node(lambda s: seen.append("c"), "c")
    result = await (a >> b >> c).run({})
    assert (result.status, result.reason, result.visited) == ("failed", "nope", ("a", "b"))
    assert seen == ["a"]


async def test_rejected_node_stops_graph_early():
    result = await (Node(lambda s: Rejected("policy"), "a") >> Node(lambda s: None, "b")).run({})
    assert result.status == "rejected" and result.visited == ("a",)


def test_router_to_unknown_node_is_a_usage_error():
    g = StateGraph().add_node(Node(lambda s: None, "a"))
    with pytest.raises(ValueError):
        g.add_edge("a", "missing")


async def test_pipeline_of_three_agent_runs(gateway):
    research = AgentRun("research", scripted_decide(ToolCall("lookup_policy", {"topic": "refunds"}),
                                                    Answer("refunds over 500 need a manager")),
                        gateway, goal="find the refund policy")
    draft = AgentRun("draft", lambda s: Answer(f"Draft: {s.goal}"), gateway,
                     goal=lambda st: st["last_answer"])
    review = AgentRun("review", lambda s: Answer("approved: " + s.goal), gateway,
                      goal=lambda st: st["last_answer"])
    pipeline = research >> draft >> review
    assert isinstance(pipeline, StateGraph)
    result = await pipeline.run({})
    assert result.ok and result.visited == ("research", "draft", "review")
    assert result.state["last_answer"] == "approved: Draft: refunds over 500 need a manager"
    assert result.state["runs"]["research"].state.tools_called == ["lookup_policy"]


async def test_pipeline_stops_when_a_run_is_refused(fake, gateway):
    first = AgentRun("delete", lambda s: ToolCall("delete_file", {"path": "x"}), gateway, goal="rm")
    second = AgentRun("after", lambda s: Answer("never"), gateway, goal="x")
    result = await (first >> second).run({})
    assert result.status == "rejected" and result.visited == ("delete",)
    assert "after" not in result.state["runs"]


async def test_cyclic_graph_is_bounded():
    g = StateGraph(max_visits=5).add_node(Node(lambda s: None, "a")).set_entry_point("a")
    g.add_edge("a", "a")
    result = await g.run({})
    assert result.status == "failed" and len(result.visited) == 5
