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
    """Chunks per fabric link (out-group, in-group given per link) that maximise crossings."""
    graph = nx.DiGraph()
    for key, room in link_room.items():
        if room <= 0:
            continue
        out_group, in_group = link_groups[key]
        if group_room.get(out_group, 0) <= 0 or group_room.get(in_group, 0) <= 0:
            continue
        graph.add_edge("source", ("out", out_group), capacity=group_room[out_group])
        graph.add_edge(("out", out_group), ("link", key), capacity=room)
        graph.add_edge(("link", key), ("in", in_group), capacity=room)
        graph.add_edge(("in", in_group), "sink", capacity=group_room[in_group])
    if "source" not in graph or "sink" not in graph:
        return {}
    _, flow = nx.maximum_flow(graph, "source", "sink")
    plan = {}
    for node, targets in flow.items():
        if isinstance(node, tuple) and node[0] == "link":
            amount = sum(targets.values())
            if amount > 0:
                plan[node[1]] = int(round(amount))
    return dict(sorted(plan.items()))
