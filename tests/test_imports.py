"""No import cycles inside mxfp4_mm/: the graph of which module imports which, read statically.

What counts as an edge (A -> B: module A imports module B):
- every `import` statement anywhere in A, also inside functions: a function-level import only
  postpones the cycle to the first call, the two modules still depend on each other;
- `from P import name` is an edge to P.name when that is a module of the package, else to P;
- importing P.Q is not an edge to P's __init__ (Python runs it first anyway; counting it would make
  every submodule that the package's __init__ imports look cyclic);
- modules loaded by name at run time (`importlib.import_module(BACKEND_MODULES[...])`, the
  dispatcher's backend registry) are not edges: the registry maps names to plug-ins, and a
  plug-in may use the dispatcher's helpers without the two depending on each other statically.
"""

import ast
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent.parent / "mxfp4_mm"


def module_names(root: Path) -> dict:
    """{dotted module name: path} of every .py file under the package directory `root`."""
    names = {}
    for path in sorted(root.rglob("*.py")):
        parts = (root.name,) + path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def _base_of_relative(module: str, is_package: bool, level: int) -> str:
    """The package a `from .{level} import` in `module` starts from."""
    parts = module.split(".")
    keep = len(parts) - level + (1 if is_package else 0)
    if keep < 1:
        raise ImportError(f"{module}: relative import beyond the top-level package")
    return ".".join(parts[:keep])


def imports_of(module: str, path: Path, known: set):
    """[(imported module, line)] for every import in the file that names a module in `known`."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                prefix = _base_of_relative(module, is_package, node.level)
                base = f"{prefix}.{base}" if base else prefix
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                       for alias in node.names]
        else:
            continue
        found += [(target, node.lineno) for target in targets if target in known and target != module]
    return found


def import_graph(root: Path) -> dict:
    """{module: {imported module: first line}} for the package at `root`."""
    names = module_names(root)
    graph = {}
    for module, path in names.items():
        edges = graph.setdefault(module, {})
        for target, line in imports_of(module, path, set(names)):
            edges.setdefault(target, line)
    return graph


def find_cycles(graph: dict) -> list:
    """One cycle [m0, m1, ..., m0] per strongly connected component of more than one module."""
    index, low, on_stack, stack, components = {}, {}, set(), [], []

    def visit(node):  # Tarjan; the package is small, recursion depth is no concern
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in graph[node]:
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(set(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_cycle_within(graph, component) for component in components]


def _cycle_within(graph: dict, component: set) -> list:
    """A shortest cycle through the component's first module (breadth-first inside the component)."""
    start = min(component)
    came_from = {start: None}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for succ in sorted(graph[node]):
                if succ == start:
                    path = [node]
                    while came_from[path[-1]] is not None:
                        path.append(came_from[path[-1]])
                    return list(reversed(path)) + [start]
                if succ in component and succ not in came_from:
                    came_from[succ] = node
                    following.append(succ)
        frontier = following
    raise AssertionError(f"no cycle found in component {component}")


def describe(graph: dict, cycle: list) -> str:
    return " -> ".join(f"{a} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:])) + f" -> {cycle[-1]}"


def test_the_package_has_no_import_cycles():
    graph = import_graph(PACKAGE_ROOT)
    cycles = [describe(graph, cycle) for cycle in find_cycles(graph)]
    assert not cycles, "import cycles inside mxfp4_mm/:\n  " + "\n  ".join(cycles)


def test_each_backend_is_one_room_that_imports_no_dispatcher():
    """A backend's modules live under backends/<name>/ (or are one module), and none of them imports
    the dispatcher or the tuner above it: the dispatcher picks backends, never the reverse."""
    graph = import_graph(PACKAGE_ROOT)
    backends = [name for name in graph if name.startswith("mxfp4_mm.backends.")]
    assert {"mxfp4_mm.backends.cuda.plans", "mxfp4_mm.backends.triton.plans", "mxfp4_mm.backends.hip.plans"} <= set(backends)
    above = ("mxfp4_mm.dispatch", "mxfp4_mm.autotune", "mxfp4_mm.tune", "mxfp4_mm.prepare")
    offenders = {name: sorted(set(graph[name]) & set(above)) for name in backends if set(graph[name]) & set(above)}
    assert not offenders, offenders
    rooms = {name.split(".")[2] for name in backends}
    assert not any(other.startswith(f"mxfp4_mm.backends.{room}_") for room in rooms for other in graph), rooms


def test_the_graph_sees_the_package_imports():
    graph = import_graph(PACKAGE_ROOT)
    assert "mxfp4_mm.dispatch" in graph["mxfp4_mm"]                   # from . import dispatch
    assert "mxfp4_mm.backends.triton.kernels" in graph["mxfp4_mm.backends.triton"]  # used by launches
    assert "mxfp4_mm.backends.hip.plans" in graph["mxfp4_mm.backends.hip"]  # from . import plans
    assert "mxfp4_mm" in graph["mxfp4_mm.library"]                    # from . import gemm (a name)


def _write_package(root: Path, files: dict) -> Path:
    package = root / "pkg"
    for name, text in files.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return package


def test_a_cycle_through_a_function_level_import_is_found(tmp_path):
    package = _write_package(tmp_path, {
        "__init__.py": "from . import a\n",
        "a.py": "from .sub import b\n",
        "sub/__init__.py": "",
        "sub/b.py": "def f():\n    from .. import a\n    return a\n",
        "c.py": "import pkg.a\n",
    })
    graph = import_graph(package)
    assert find_cycles(graph) == [["pkg.a", "pkg.sub.b", "pkg.a"]]
    assert describe(graph, ["pkg.a", "pkg.sub.b", "pkg.a"]) == \
        "pkg.a (line 1) -> pkg.sub.b (line 2) -> pkg.a"


def test_an_acyclic_package_passes(tmp_path):
    package = _write_package(tmp_path, {
        "__init__.py": "from .a import f\n",
        "a.py": "from . import b\nf = b.g\n",
        "b.py": "import importlib\ng = lambda: importlib.import_module('pkg.a')\n",
    })
    assert find_cycles(import_graph(package)) == []
