"""Which fabric links to use in one step: a max flow through NIC groups (networkx).

Between machines, every link goes out through one NIC group and in through another. Choosing
chunk crossings one chunk at a time leaves NIC ports idle (a greedy matching is not maximum);
a max flow source -> NIC-out -> link -> NIC-in -> sink over the links that have something useful
to carry finds the most crossings the step can hold. ``plan_crossings`` returns how many chunks
each link should carry; the caller then picks which chunks.

>>> plan = plan_crossings({(0, 2): 1, (1, 2): 1, (1, 3): 1},
...                       {(0, 2): ("a-out", "x-in"), (1, 2): ("b-out", "x-in"), (1, 3): ("b-out", "y-in")},
...                       {"a-out": 1, "b-out": 1, "x-in": 1, "y-in": 1})
>>> plan  # b must use its one NIC slot for rank 3, or x-in and y-in cannot both be fed
{(0, 2): 1, (1, 3): 1}
"""

from __future__ import annotations

import networkx as nx


def plan_crossings(
    link_room: dict[tuple[int, int], int],
    link_groups: dict[tuple[int, int], tuple[str, str]],
    group_room: dict[str, int],
) -> dict[tuple[int, int], int]:
    """Chunks per fabric link (out-group, in-group given per link) that maximise crossings.

    Links that join the same pair of groups are one edge of the flow graph (their rooms add
    up); the pair's flow is then dealt out over its links in order.
    """
    pairs: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for key, room in sorted(link_room.items()):
        if room <= 0:
            continue
        out_group, in_group = link_groups[key]
        if group_room.get(out_group, 0) <= 0 or group_room.get(in_group, 0) <= 0:
            continue
        pairs.setdefault((out_group, in_group), []).append(key)
    if not pairs:
        return {}
    # integer node ids: networkx walks node sets, and strings hash differently in every process
    ids: dict[tuple[str, str], int] = {}

    def node(kind: str, name: str) -> int:
        return ids.setdefault((kind, name), len(ids) + 2)  # 0: source, 1: sink

    graph = nx.DiGraph()
    for (out_group, in_group), keys in pairs.items():
        out_node, in_node = node("out", out_group), node("in", in_group)
        graph.add_edge(0, out_node, capacity=group_room[out_group])
        graph.add_edge(out_node, in_node, capacity=sum(link_room[k] for k in keys))
        graph.add_edge(in_node, 1, capacity=group_room[in_group])
    _, flow = nx.maximum_flow(graph, 0, 1)
    plan: dict[tuple[int, int], int] = {}
    for (out_group, in_group), keys in pairs.items():
        amount = int(round(flow[ids[("out", out_group)]].get(ids[("in", in_group)], 0)))
        for key in keys:
            if amount <= 0:
                break
            take = min(amount, link_room[key])
            plan[key] = take
            amount -= take
    return dict(sorted(plan.items()))
