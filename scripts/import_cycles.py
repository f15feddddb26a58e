"""Count the import cycles between psirag's modules, imports inside functions included.

A cycle here is a strongly connected component of two or more modules in the import graph
that grimp (import-linter's graph library) builds from every import statement, at module level
or inside a function, ``if TYPE_CHECKING`` blocks excepted (they never run). Prints each cycle
and their number; exits 1 when there is any, so CI or a reviewer can measure the count.

    PYTHONPATH=src python scripts/import_cycles.py
"""

from __future__ import annotations

import sys

import grimp


def module_cycles(package: str = "psirag") -> list[list[str]]:
    """The strongly connected components of two or more modules, each sorted, largest first."""
    graph = grimp.build_graph(package, exclude_type_checking_imports=True, cache_dir=None)
    modules = sorted(graph.modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in modules:  # Tarjan's algorithm, iterative (the graph is a few hundred modules)
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            targets = edges.get(node, [])
            if i < len(targets):
                work.append((node, i + 1))
                nxt = targets[i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return sorted(found, key=lambda c: (-len(c), c))


def main() -> int:
    cycles = module_cycles()
    for cycle in cycles:
        print(f"{len(cycle)} modules: " + ", ".join(cycle))
    print(f"{len(cycles)} import cycles")
    return 1 if cycles else 0


if __name__ == "__main__":
    sys.exit(main())
