"""Fail if any modules of the package import each other in a circle (TYPE_CHECKING imports
included): import-linter's layers keep packages apart, this keeps modules within a package
apart too. Run from the staged tree (see check-architecture)."""

import sys

import grimp


def cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in graph.modules:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append(
                        (child, iter(sorted(graph.find_modules_directly_imported_by(child))))
                    )
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
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
    return found


def main() -> int:
    graph = grimp.build_graph("minibroker", cache_dir=None)
    found = cycles(graph)
    for component in found:
        print("import circle:", " <-> ".join(component))
        for module in component:
            for imported in sorted(graph.find_modules_directly_imported_by(module)):
                if imported in component:
                    lines = graph.get_import_details(importer=module, imported=imported)
                    where = ", ".join(str(d["line_number"]) for d in lines)
                    print(f"    {module} -> {imported} (l.{where})")
    if not found:
        print(f"no import circles among {len(graph.modules)} modules")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
