"""The house's rules, read from the package's source (issue 25, issue 41).

- No import circles between charfmt's modules, counting imports inside functions
  (``TYPE_CHECKING`` blocks are left out: they never run).
- No function over 80 lines and no class over 400 lines.
- No private name crosses a module line: no ``from charfmt.x import _name`` (a private
  *module* may be imported) and no ``x._name`` of an imported module.
- No module that only re-exports other modules' names, except the public doors the docs name.
- Few repeated runs of lines: ``duplicates`` over the package lists at most six pairs, each of them
  boilerplate (where that tool is installed).

Each rule has a list of known exceptions, which only shrinks: a test also fails when an
exception is no longer needed, so the list stays true.
"""

from __future__ import annotations

import ast
import fnmatch
import functools
import importlib
import json
import re
import shutil
import subprocess
import tokenize
from pathlib import Path

import pytest
from conftest import ROOT

PACKAGE = ROOT / "charfmt"

MAX_FUNCTION_LINES = 80
MAX_CLASS_LINES = 400

# Circles (strongly connected groups of modules) still to cut.
KNOWN_CIRCLES: set[frozenset[str]] = set()

# "module:qualified.name" of functions and classes still too long.
KNOWN_LONG: set[str] = set()


def _modules(package: Path = PACKAGE) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
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


@functools.cache
def _tree(path: Path) -> ast.Module:
    """The syntax tree of a module, parsed once for every test of this file (they walk the same ~200 files)."""
    return ast.parse(path.read_text(encoding="utf-8"))


def import_graph() -> dict[str, set[str]]:
    """Module -> the charfmt modules it imports (at top level or inside functions)."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = _tree(path)
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
        tree = _tree(path)

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
    modules, named = {m for m in _modules() if m != "charfmt"}, _named()
    for line in section.splitlines():
        if line.startswith("### "):
            heading = line[4:].strip()
        elif line.startswith("- `"):
            for module in _expand([line[3:].split("`", 1)[0]], modules, named):
                assert module not in listed, f"{module} listed twice"
                listed[module] = heading
    assert set(listed) == modules, f"missing: {sorted(modules - set(listed))}; gone: {sorted(set(listed) - modules)}"
    misplaced = {m: h for m, h in listed.items() if table[layer_of(m, table)[0]][0] != h}
    assert not misplaced, f"listed under another layer than its own: {misplaced}"


# --- wings: an order inside each layer (issue 41) ---------------------------------------------


def _named() -> set[str]:
    """The modules the module list names one by one."""
    section = ARCHITECTURE.read_text(encoding="utf-8").split("\n## Modules\n", 1)[1].split("\n## ", 1)[0]
    return {line[3:].split("`", 1)[0] for line in section.splitlines() if line.startswith("- `")}


def _expand(names: list[str], modules: set[str], named: set[str]) -> list[str]:
    """A ``pkg.*`` line of the module list stands for every module of the plug-in folder ``pkg`` it does not
    name (one module per row of a table, all of one shape, such as ``serve/upstreams/``: adding a row's module
    adds no line). A pattern that stands for no module is itself an error."""
    out: list[str] = []
    for name in names:
        if not name.endswith(".*"):
            out.append(name)
            continue
        members = sorted(m for m in modules if m.rpartition(".")[0] == name[:-2] and m not in named)
        assert members, f"{name} stands for no module"
        out += members
    return out


def _module_list() -> dict[str, list[str]]:
    """The module list of docs/ARCHITECTURE.md: each layer's heading -> its modules, in the listed order
    (a ``pkg.*`` line: its folder's modules not named elsewhere, in its place)."""
    section = ARCHITECTURE.read_text(encoding="utf-8").split("\n## Modules\n", 1)[1].split("\n## ", 1)[0]
    listed: dict[str, list[str]] = {}
    heading = ""
    modules, named = set(_modules()), _named()
    for line in section.splitlines():
        if line.startswith("### "):
            heading = line[4:].strip()
            listed[heading] = []
        elif line.startswith("- `"):
            listed[heading] += _expand([line[3:].split("`", 1)[0]], modules, named)
    return listed


def test_the_modules_a_pattern_stands_for_do_not_import_each_other() -> None:
    """A plug-in folder's modules are rows: each stands alone on its folder's base, never on another row."""
    graph, modules, named = import_graph(), set(_modules()), _named()
    for pattern in (n for n in named if n.endswith(".*")):
        members = set(_expand([pattern], modules, named))
        crossing = {m: sorted(graph.get(m, set()) & members) for m in members if graph.get(m, set()) & members}
        assert not crossing, f"{pattern}: rows importing each other: {crossing}"


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
    for node in _tree(path).body:
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
        tree = _tree(modules[door])
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


# --- private names and doors (issue 41) ------------------------------------------------------

KNOWN_PRIVATE_CROSSINGS: dict[tuple[str, str], str] = {
    ("charfmt.constrain.engines", "charfmt.constrain.export"): "the server recipes share export's writers",
}
"""``(importer, module)`` pairs where a private name still crosses a module line, each with its reason.

It only shrinks: a pair no longer crossing fails ``test_known_private_crossings_still_cross``."""

PUBLIC_DOORS: dict[str, str] = {
    "charfmt.body": "the strict body reader's documented door (docs/GRAMMARS.md: charfmt.body.parse_body)",
    "charfmt.store": "the conversation stores' package face (docs/API.md, docs/SESSIONS.md: open_store)",
    "charfmt.testing": "the hypothesis strategies' public door (docs/API.md, docs/TESTING.md)",
    **{door: f"the old public path of {', '.join(homes)} (moved into a wing)" for door, homes in WING_DOORS.items()},
}
"""Modules that only re-export, kept because the docs send users to them, each with its reason."""

USERS_ONLY: frozenset[str] = frozenset({"charfmt.body", "charfmt.testing", *WING_DOORS})
"""Doors for users alone: no module of the package imports them (it reads the real homes)."""


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _import_source(node: ast.ImportFrom, module: str, path: Path) -> str:
    """The absolute module an ``ImportFrom`` reads from (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    base = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join([*base, *([node.module] if node.module else [])])


def private_crossings(package: Path = PACKAGE) -> dict[tuple[str, str], set[str]]:
    """``(importer, module) -> private names`` read across a module line: imported, or a module's attribute."""
    modules = _modules(package)
    found: dict[tuple[str, str], set[str]] = {}
    for name, path in modules.items():
        tree = _tree(path)
        bound: dict[str, str] = {}  # local name -> the charfmt module it is
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                source = _import_source(node, name, path)
                if source.split(".")[0] != package.name:
                    continue
                for alias in node.names:
                    if f"{source}.{alias.name}" in modules:
                        bound[alias.asname or alias.name] = f"{source}.{alias.name}"
                    elif _private(alias.name) and source != name:
                        found.setdefault((name, source), set()).add(alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == package.name:
                        bound[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else package.name
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _private(node.attr):
                chain: list[str] = []
                value: ast.expr = node.value
                while isinstance(value, ast.Attribute):
                    chain.insert(0, value.attr)
                    value = value.value
                if isinstance(value, ast.Name) and value.id in bound:
                    target = ".".join([bound[value.id], *chain])
                    if target in modules and target != name:
                        found.setdefault((name, target), set()).add(node.attr)
    return found


def test_no_private_name_crosses_a_module_line() -> None:
    new = {pair: names for pair, names in private_crossings().items() if pair not in KNOWN_PRIVATE_CROSSINGS}
    assert not new, "private names read across a module line (make them public names of their module): " + "; ".join(
        f"{importer} takes {sorted(names)} from {module}" for (importer, module), names in sorted(new.items())
    )


def test_known_private_crossings_still_cross() -> None:
    gone = set(KNOWN_PRIVATE_CROSSINGS) - set(private_crossings())
    assert not gone, f"no longer crossing (delete from KNOWN_PRIVATE_CROSSINGS): {sorted(gone)}"


def test_the_crossing_check_sees_imports_relative_imports_and_attributes(tmp_path: Path) -> None:
    package = tmp_path / "charfmt"
    (package / "_inner").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "a.py": "_SECRET = 1\ndef _helper() -> None: ...\nPUBLIC = 2\n",
        "b.py": "from charfmt.a import PUBLIC, _SECRET\n",
        "c.py": "from charfmt import a\nx = a._helper\n",
        "d.py": "import charfmt.a\nx = charfmt.a._SECRET\n",
        "_inner/__init__.py": "",
        "_inner/e.py": "from ..a import _helper\nfrom . import f\ny = f.PUBLIC\n",
        "_inner/f.py": "from charfmt import _inner\nPUBLIC = 3\n",
    }
    for file, text in files.items():
        (package / file).write_text(text, encoding="utf-8")
    assert private_crossings(package) == {
        ("charfmt.b", "charfmt.a"): {"_SECRET"},
        ("charfmt.c", "charfmt.a"): {"_helper"},
        ("charfmt.d", "charfmt.a"): {"_SECRET"},
        ("charfmt._inner.e", "charfmt.a"): {"_helper"},
    }


def _defines_nothing(statements: list[ast.stmt]) -> bool:
    """Whether these statements only import, name ``__all__``, alias an imported name or hold a docstring."""
    for s in statements:
        if isinstance(s, ast.Import | ast.ImportFrom | ast.Raise | ast.Pass):
            continue
        if isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant):
            continue
        if isinstance(s, ast.Assign | ast.AnnAssign):
            targets = s.targets if isinstance(s, ast.Assign) else [s.target]
            if all(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                continue
            if isinstance(s.value, ast.Name | ast.Attribute):  # an alias of an imported name
                continue
            return False
        elif isinstance(s, ast.If):
            if not (_defines_nothing(s.body) and _defines_nothing(s.orelse)):
                return False
        elif isinstance(s, ast.Try):
            parts = [s.body, s.orelse, s.finalbody, *(h.body for h in s.handlers)]
            if not all(_defines_nothing(p) for p in parts):
                return False
        else:
            return False
    return True


def reexport_only(package: Path = PACKAGE) -> set[str]:
    """Modules that import names from other charfmt modules and define none of their own."""
    found: set[str] = set()
    for name, path in _modules(package).items():
        tree = _tree(path)
        imports_charfmt = any(
            isinstance(n, ast.ImportFrom) and _import_source(n, name, path).split(".")[0] == package.name
            for n in ast.walk(tree)
        )
        if imports_charfmt and _defines_nothing(tree.body):
            found.add(name)
    return found


def test_no_module_only_re_exports_but_the_documented_doors() -> None:
    extra = reexport_only() - set(PUBLIC_DOORS)
    assert not extra, f"modules that only re-export (import from the real home and delete them): {sorted(extra)}"
    gone = set(PUBLIC_DOORS) - reexport_only()
    assert not gone, f"no longer a door (delete from PUBLIC_DOORS): {sorted(gone)}"


def test_the_users_doors_are_imported_by_nothing_inside_the_package() -> None:
    assert set(PUBLIC_DOORS) >= USERS_ONLY
    graph = import_graph()
    leaks = {door: sorted(m for m, imported in graph.items() if door in imported) for door in USERS_ONLY}
    assert not any(leaks.values()), f"modules importing a users' door instead of the real home: {leaks}"


def test_the_re_export_check_sees_a_door(tmp_path: Path) -> None:
    package = tmp_path / "charfmt"
    package.mkdir()
    files = {
        "__init__.py": '"""The package."""\n',
        "home.py": "def read() -> None: ...\n",
        "door.py": '"""A door."""\nfrom __future__ import annotations\nfrom charfmt.home import read\n'
        "__all__ = ['read']\nalias = read\n",
        "guarded.py": "try:\n    from charfmt.home import read\nexcept ImportError:\n    raise\n",
        "room.py": "from charfmt.home import read\nLIMIT = 3\n",
    }
    for file, text in files.items():
        (package / file).write_text(text, encoding="utf-8")
    assert reexport_only(package) == {"charfmt.door", "charfmt.guarded"}


def test_each_door_opens_onto_its_names() -> None:
    """Every name a door lists is there, defined in the real home; ``charfmt.body.parse_body`` reads as documented."""
    import charfmt.body

    assert charfmt.body.parse_body("C", "<emo>joy</emo>\n<msg>Hi &amp; bye</msg>") == [
        ("emo", "joy"),
        ("msg", "Hi & bye"),
    ]
    for door in PUBLIC_DOORS:
        module = importlib.import_module(door)
        missing = [name for name in module.__all__ if not hasattr(module, name)]
        assert not missing, f"{door} lists names it does not hold: {missing}"
        own = [n for n in module.__all__ if getattr(getattr(module, n), "__module__", None) == door]
        assert not own, f"{door} defines {own}: a door only re-exports"


DOOR_NAMES: dict[str, list[str]] = json.loads((Path(__file__).parent / "door_names.json").read_text(encoding="utf-8"))
"""Every name each old path listed when it restated its home's list (before it became a star import of the
home and the home's ``__all__``): a user's ``from charfmt.export import grammar`` must keep working."""


@pytest.mark.parametrize(
    ("door", "name"),
    [pytest.param(door, name, id=f"{door}:{name}") for door, names in DOOR_NAMES.items() for name in names],
)
def test_every_name_a_door_listed_still_imports_from_it(door: str, name: str) -> None:
    module = importlib.import_module(door)
    homes = [importlib.import_module(home) for home in WING_DOORS[door]]
    assert name in module.__all__, f"{door}.__all__ lost {name}"
    assert [getattr(module, name)] == [getattr(h, name) for h in homes if name in h.__all__], f"{door}.{name}"
    namespace: dict[str, object] = {}
    exec(f"from {door} import *", namespace)
    assert namespace[name] is getattr(module, name), f"from {door} import * lost {name}"


@pytest.mark.parametrize("home", sorted({home for homes in WING_DOORS.values() for home in homes}))
def test_a_doors_home_lists_every_public_name_it_defines(home: str) -> None:
    """A door is a star import of its home, so a public name the home defines but leaves out of its ``__all__``
    would be missing from the door: each home's ``__all__`` holds every public name it defines."""
    module = importlib.import_module(home)
    missing = sorted(set(_defined_public_names(_modules()[home])) - set(module.__all__))
    assert not missing, f"{home}.__all__ lacks {missing} (its door would not have them)"


def test_a_renamed_public_name_still_imports_under_its_old_name() -> None:
    """``FORMATS`` meant four things (issue 41); each is named for its job now, and the one that was public API,
    ``charfmt.interop.FORMATS``, still imports, as the same table."""
    from charfmt import interop

    assert interop.FORMATS is interop.CONVERTERS
    assert {"CONVERTERS", "FORMATS"} <= set(interop.__all__)


# --- a reason on every noqa (issue 41) ---------------------------------------------------------

NOQA = re.compile(r"#\s*(?:ruff:\s*)?noqa\b(?::\s*[A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*)?(?P<rest>.*)", re.IGNORECASE)

KNOWN_BARE_NOQA: dict[str, str] = {}
"""Files whose ``noqa`` comments still lack a reason, each with why; it only shrinks."""


def bare_noqa(package: Path = PACKAGE) -> dict[str, list[int]]:
    """``file -> lines`` of ``noqa`` comments without a reason in parentheses right after their codes."""
    found: dict[str, list[int]] = {}
    for path in sorted(package.rglob("*.py")):
        with path.open("rb") as f:
            comments = [t for t in tokenize.tokenize(f.readline) if t.type == tokenize.COMMENT]
        for token in comments:
            match = NOQA.search(token.string)
            if match and not re.fullmatch(r"\s*\(.*\S.*\)\s*", match.group("rest")):
                found.setdefault(path.relative_to(package.parent).as_posix(), []).append(token.start[0])
    return found


def test_every_noqa_says_why() -> None:
    """``# noqa: PLC0415 (import cost: pydantic models load on first use)``: the codes, then the reason."""
    new = {file: lines for file, lines in bare_noqa().items() if file not in KNOWN_BARE_NOQA}
    assert not new, f"noqa without a reason in parentheses after its codes: {new}"
    gone = set(KNOWN_BARE_NOQA) - set(bare_noqa())
    assert not gone, f"every noqa there says why now (delete from KNOWN_BARE_NOQA): {sorted(gone)}"


def test_the_noqa_check_sees_a_bare_noqa_and_not_a_string(tmp_path: Path) -> None:
    package = tmp_path / "charfmt"
    package.mkdir()
    (package / "a.py").write_text(
        "import os  # noqa: F401\n"
        "import re  # noqa: F401 (kept for users)\n"
        "import sys  # noqa\n"
        "x = '# noqa: E501'\n"
        "y = 1  # noqa: E501, F841 ()\n"
        "# ruff: noqa (generated)\n"
        "z = 2  # noqa: E501 (only once settle() ran)\n",
        encoding="utf-8",
    )
    assert bare_noqa(package) == {"charfmt/a.py": [1, 3, 5]}


# --- the tests mirror the wings (issue 41, item 4) --------------------------------------------

TESTS = PACKAGE.parent / "tests"
DEVELOP = PACKAGE.parent / "docs" / "DEVELOP.md"
WHOLE_SYSTEM = "project"
"""The folder of the tests of the whole system (README, docs, architecture, packaging, CI, examples)."""


def test_every_test_file_sits_in_a_wing_folder() -> None:
    """``tests/<wing>/test_*.py`` for a wing of the layer table, or ``tests/project/``; nothing flat, nothing deeper."""
    folders = {name for name, _ in layers()} | {WHOLE_SYSTEM}
    astray = sorted(
        path.relative_to(TESTS).as_posix()
        for path in TESTS.rglob("test_*.py")
        if len(path.relative_to(TESTS).parts) != 2 or path.parent.name not in folders
    )
    assert not astray, f"test files outside tests/<wing>/ (wings: docs/ARCHITECTURE.md; or tests/project/): {astray}"


def public_modules() -> list[str]:
    """The package's modules with no private part in the name (``charfmt.serve.app``; not ``charfmt._strict.fast``)."""
    return [m for m in _modules() if m != "charfmt" and not any(p.startswith("_") for p in m.split(".")[1:])]


def files_named_for(module: str, table: list[tuple[str, list[str]]], tests: Path = TESTS) -> list[str]:
    """The test files named for a module: ``tests/<its wing>/test_<name>*.py``, its name alone
    (``charfmt.serve.guard``: ``guard``) or with its package's (``serve_guard``)."""
    parts = module.split(".")[1:]
    names = [parts[-1], *(["_".join(parts[-2:])] if len(parts) > 1 else [])]
    wing = tests / table[layer_of(module, table)[0]][0]
    return sorted({p.relative_to(tests.parent).as_posix() for name in names for p in wing.glob(f"test_{name}*.py")})


def module_test_table() -> dict[str, list[str]]:
    """docs/DEVELOP.md's table of the modules whose tests are not named for them: module -> the test files."""
    section = DEVELOP.read_text(encoding="utf-8").split("\n## Where each module's tests are\n", 1)[1]
    table: dict[str, list[str]] = {}
    for line in section.split("\n## ", 1)[0].splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0].startswith("`charfmt"):
            files = re.findall(r"`(tests/[^`]+)`", cells[1])
            for module in re.findall(r"`(charfmt[^`]*)`", cells[0]):
                assert module not in table, f"{module} is in DEVELOP.md's table twice"
                table[module] = files
    return table


def test_each_public_module_has_tests_findable_by_its_name_or_listed() -> None:
    table = layers()
    listed = module_test_table()
    unfound = [m for m in public_modules() if not files_named_for(m, table) and m not in listed]
    assert not unfound, (
        "modules with no tests/<wing>/test_<name>*.py: name a test file for them, or list them with where their "
        f"tests are in docs/DEVELOP.md's table: {unfound}"
    )


def test_the_table_of_module_tests_is_true() -> None:
    """Each row of DEVELOP.md's table names public modules whose tests are not named for them, and test files that
    exist."""
    table = layers()
    listed = module_test_table()
    assert listed, "docs/DEVELOP.md has no table of where each module's tests are"
    gone = sorted(set(listed) - set(public_modules()))
    assert not gone, f"DEVELOP.md's table lists modules that are not public modules of the package: {gone}"
    named = {m: files_named_for(m, table) for m in listed if files_named_for(m, table)}
    assert not named, f"now findable by their names (delete from DEVELOP.md's table): {named}"
    missing = {m: [f for f in files if not (TESTS.parent / f).is_file()] for m, files in listed.items()}
    assert all(files for files in listed.values()), (
        f"rows naming no test file: {[m for m, f in listed.items() if not f]}"
    )
    assert not any(missing.values()), f"DEVELOP.md's table names test files that do not exist: {missing}"


def test_tests_are_found_by_a_module_name_or_its_package_and_name(tmp_path: Path) -> None:
    table = [("base", ["charfmt.a"]), ("serve", ["charfmt.serve", "charfmt.serve.*"])]
    for file in ("base/test_a.py", "base/test_ab_cases.py", "serve/test_serve_guard.py", "serve/test_guard.py"):
        (tmp_path / file).parent.mkdir(exist_ok=True)
        (tmp_path / file).write_text("", encoding="utf-8")
    here = tmp_path.name
    assert files_named_for("charfmt.a", table, tmp_path) == [f"{here}/base/test_a.py", f"{here}/base/test_ab_cases.py"]
    assert files_named_for("charfmt.serve.guard", table, tmp_path) == [
        f"{here}/serve/test_guard.py",
        f"{here}/serve/test_serve_guard.py",
    ]
    assert files_named_for("charfmt.serve.wire", table, tmp_path) == []
    assert files_named_for("charfmt.serve", table, tmp_path) == [f"{here}/serve/test_serve_guard.py"]


MAX_DUPLICATE_PAIRS = 6
"""Issue 41: ``duplicates`` over ``charfmt/`` lists at most this many pairs, none outside boilerplate."""


def test_the_package_repeats_itself_little_and_only_as_boilerplate() -> None:
    tool = shutil.which("duplicates")
    if tool is None:
        pytest.skip("the duplicates tool is not installed (a tool of the house's machines, not a dependency)")
    done = subprocess.run(
        [tool, "--most", "200"], cwd=PACKAGE, capture_output=True, text=True, timeout=120, check=False
    )
    assert "incomplete:" not in done.stdout, done.stdout
    rows = [line for line in done.stdout.splitlines() if re.match(r"D\d+ ", line)]
    assert len(rows) <= MAX_DUPLICATE_PAIRS, done.stdout
    assert all(line.endswith(" boilerplate") or " boilerplate (" in line for line in rows), done.stdout
