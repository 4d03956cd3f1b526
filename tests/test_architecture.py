"""The house's rules, read from the package's source (issue 25).

- No import circles between charfmt's modules, counting imports inside functions
  (``TYPE_CHECKING`` blocks are left out: they never run).
- No function over 80 lines and no class over 400 lines.

Each rule has a list of known exceptions, which only shrinks: a test also fails when an
exception is no longer needed, so the list stays true.
"""

from __future__ import annotations

import ast
import fnmatch
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "charfmt"

MAX_FUNCTION_LINES = 80
MAX_CLASS_LINES = 400

# Circles (strongly connected groups of modules) still to cut.
KNOWN_CIRCLES: set[frozenset[str]] = set()

# "module:qualified.name" of functions and classes still too long.
KNOWN_LONG: set[str] = set()


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                skipped.update(id(n) for n in ast.walk(inner))
    return skipped


def import_graph() -> dict[str, set[str]]:
    """Module -> the charfmt modules it imports (at top level or inside functions)."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skipped = _type_checking_nodes(tree)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    source = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    source = node.module or ""
                targets = [
                    f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source for alias in node.names
                ]
            for written in targets:
                # `import charfmt.x.y` also runs charfmt.x; the bare package is its lazy facade
                target = written
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target not in {name, "charfmt"}:
                    graph[name].add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The strongly connected groups of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()
    for root, imported in graph.items():
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(imported))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, pending = work[-1]
            if pending:
                nxt = pending.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph[nxt])))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group: set[str] = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.add(frozenset(group))
    return found


def long_definitions() -> set[str]:
    """Functions over MAX_FUNCTION_LINES and classes over MAX_CLASS_LINES, as module:qualname."""
    found: set[str] = set()
    for name, path in _modules().items():
        short = name.removeprefix("charfmt.") if name != "charfmt" else "__init__"
        tree = ast.parse(path.read_text(encoding="utf-8"))

        def visit(node: ast.AST, prefix: str, short: str = short) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    qualname = f"{prefix}{child.name}"
                    lines = (child.end_lineno or child.lineno) - child.lineno + 1
                    limit = MAX_CLASS_LINES if isinstance(child, ast.ClassDef) else MAX_FUNCTION_LINES
                    if lines > limit:
                        found.add(f"{short}:{qualname}")
                    visit(child, qualname + ".")
                else:
                    visit(child, prefix)

        visit(tree, "")
    return found


def test_the_graph_sees_imports_inside_functions() -> None:
    graph = import_graph()
    # charfmt.cli imports the chat subcommand inside a function: the edge must be seen.
    assert any(graph.values())
    assert "charfmt.diagnostics" in graph["charfmt.parser"]


def test_no_new_import_circle() -> None:
    new = circles(import_graph()) - KNOWN_CIRCLES
    assert not new, "new import circles: " + "; ".join(" <-> ".join(sorted(c)) for c in new)


def test_known_circles_still_exist() -> None:
    gone = KNOWN_CIRCLES - circles(import_graph())
    assert not gone, "cut (delete from KNOWN_CIRCLES): " + "; ".join(" <-> ".join(sorted(c)) for c in gone)


def test_no_new_long_definition() -> None:
    new = long_definitions() - KNOWN_LONG
    assert not new, f"over {MAX_FUNCTION_LINES} lines (function) or {MAX_CLASS_LINES} (class): {sorted(new)}"


def test_known_long_definitions_still_long() -> None:
    gone = KNOWN_LONG - long_definitions()
    assert not gone, f"now short enough (delete from KNOWN_LONG): {sorted(gone)}"


ARCHITECTURE = PACKAGE.parent / "docs" / "ARCHITECTURE.md"


def layers() -> list[tuple[str, list[str]]]:
    """The layer table of docs/ARCHITECTURE.md: (name, module patterns), first layer first."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    found: list[tuple[str, list[str]]] = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].isdigit():
            assert int(cells[0]) == len(found), f"layers numbered in order: {line}"
            found.append((cells[1], [p.strip("`") for p in cells[2].split()]))
    return found


def layer_of(module: str, table: list[tuple[str, list[str]]]) -> list[int]:
    return [i for i, (_, patterns) in enumerate(table) if any(fnmatch.fnmatchcase(module, p) for p in patterns)]


def test_every_module_is_in_exactly_one_layer() -> None:
    table = layers()
    assert len(table) >= 5
    wrong = {m: layer_of(m, table) for m in _modules() if m != "charfmt" and len(layer_of(m, table)) != 1}
    assert not wrong, f"modules in no layer or in several (docs/ARCHITECTURE.md): {wrong}"


def test_no_import_goes_up_the_layers() -> None:
    table = layers()
    up = []
    for module, imported in import_graph().items():
        if module == "charfmt":
            continue
        (mine,) = layer_of(module, table)
        up += [f"{module} ({table[mine][0]}) -> {t}" for t in imported if layer_of(t, table)[0] > mine]
    assert not up, "imports going up the layers of docs/ARCHITECTURE.md: " + "; ".join(sorted(up))


def test_the_module_list_names_every_module_once_under_its_layer() -> None:
    table = layers()
    section = ARCHITECTURE.read_text(encoding="utf-8").split("\n## Modules\n", 1)[1].split("\n## ", 1)[0]
    listed: dict[str, str] = {}
    heading = ""
    for line in section.splitlines():
        if line.startswith("### "):
            heading = line[4:].strip()
        elif line.startswith("- `"):
            module = line[3:].split("`", 1)[0]
            assert module not in listed, f"{module} listed twice"
            listed[module] = heading
    modules = {m for m in _modules() if m != "charfmt"}
    assert set(listed) == modules, f"missing: {sorted(modules - set(listed))}; gone: {sorted(set(listed) - modules)}"
    misplaced = {m: h for m, h in listed.items() if table[layer_of(m, table)[0]][0] != h}
    assert not misplaced, f"listed under another layer than its own: {misplaced}"


# --- wings: an order inside each layer (issue 41) ---------------------------------------------


def _module_list() -> dict[str, list[str]]:
    """The module list of docs/ARCHITECTURE.md: each layer's heading -> its modules, in the listed order."""
    section = ARCHITECTURE.read_text(encoding="utf-8").split("\n## Modules\n", 1)[1].split("\n## ", 1)[0]
    listed: dict[str, list[str]] = {}
    heading = ""
    for line in section.splitlines():
        if line.startswith("### "):
            heading = line[4:].strip()
            listed[heading] = []
        elif line.startswith("- `"):
            listed[heading].append(line[3:].split("`", 1)[0])
    return listed


def imports_against_the_listed_order(graph: dict[str, set[str]], listed: dict[str, list[str]]) -> list[str]:
    """Imports inside one layer that reach a module listed at or below the importer: each layer's list
    must be an import order (its ground first), which also means no circle inside a layer."""
    wrong = []
    for heading, modules in listed.items():
        place = {m: i for i, m in enumerate(modules)}
        for module in modules:
            later = sorted(t for t in graph.get(module, ()) if place.get(t, -1) > place[module])
            wrong += [f"{heading}: {module} -> {t} (listed below it)" for t in later]
    return wrong


def test_each_layer_lists_its_modules_in_import_order() -> None:
    wrong = imports_against_the_listed_order(import_graph(), _module_list())
    assert not wrong, "docs/ARCHITECTURE.md lists these below a module of their layer that imports them: " + "; ".join(
        wrong
    )


def test_the_order_check_sees_an_import_of_a_module_listed_below() -> None:
    graph = {"p.a": set(), "p.b": {"p.a"}, "p.c": {"p.b", "q.z"}, "q.z": set()}
    assert imports_against_the_listed_order(graph, {"one": ["p.a", "p.b", "p.c"], "two": ["q.z"]}) == []
    assert imports_against_the_listed_order(graph, {"one": ["p.b", "p.a", "p.c"], "two": ["q.z"]}) == [
        "one: p.b -> p.a (listed below it)"
    ]
    circle = {"p.a": {"p.b"}, "p.b": {"p.a"}}
    assert len(imports_against_the_listed_order(circle, {"one": ["p.a", "p.b"]})) == 1  # no order fits a circle


WING_DOORS: dict[str, tuple[str, ...]] = {
    "charfmt.export": ("charfmt.constrain.export",),
    "charfmt.schema": ("charfmt.constrain.schema",),
    "charfmt.engines": ("charfmt.constrain.engines", "charfmt.llm.loading"),
    "charfmt.render": ("charfmt.prompt.render",),
    "charfmt.scene": ("charfmt.prompt.scene",),
    "charfmt.cards": ("charfmt.prompt.cards",),
}
"""The old public paths of modules that moved into a wing (issue 41), each with its new homes. docs/API.md
names ``charfmt.export``, ``charfmt.engines``, ``charfmt.scene`` and ``charfmt.cards`` for users, and the
issue keeps ``charfmt.render`` and ``charfmt.schema``: each is a door (the layer table's ``doors`` row)."""


def _defined_public_names(path: Path) -> list[str]:
    """The public names a module defines at its top level (functions, classes, assigned names), not imports."""
    names: list[str] = []
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            names.append(node.target.id)
    return [n for n in dict.fromkeys(names) if not n.startswith("_")]


def test_the_old_paths_of_moved_modules_are_doors_for_users_only() -> None:
    """Each old path holds only its docstring, imports from its new homes and ``__all__``; every public
    name of its homes is there, as the same object; no module of the package imports a door."""
    import importlib

    modules = _modules()
    for door, homes in WING_DOORS.items():
        tree = ast.parse(modules[door].read_text(encoding="utf-8"))
        kinds = [type(s).__name__ for s in tree.body]
        assert set(kinds) <= {"Expr", "ImportFrom", "Assign"}, f"{door} holds more than a door: {kinds}"
        assert {n.module for n in tree.body if isinstance(n, ast.ImportFrom)} == set(homes), door
        module = importlib.import_module(door)
        for home in homes:
            real = importlib.import_module(home)
            public = getattr(real, "__all__", None) or _defined_public_names(modules[home])
            missing = [n for n in public if getattr(module, n, None) is not getattr(real, n)]
            assert not missing, f"{door} lacks {home}'s {missing}"
            assert set(public) <= set(module.__all__), (
                f"{door}.__all__ lacks {sorted(set(public) - set(module.__all__))}"
            )
    graph = import_graph()
    leaks = sorted(f"{m} -> {d}" for m, imported in graph.items() for d in WING_DOORS if d in imported)
    assert not leaks, f"modules importing an old path instead of its new home: {leaks}"
