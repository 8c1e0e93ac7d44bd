"""The house's layers: docs/design.md's diagram is an ordered list of rows (the lowest first), each a
few packages or modules of perfmodel; a module imports only its own room and the rows above its own
(imports inside functions counted), so there is no import circle, and no module imports another
module's private (`_name`) name."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "perfmodel"
DESIGN = ROOT.parent / "docs" / "design.md"

# The rows of docs/design.md's diagram, the lowest first; a room is a package or a module of
# perfmodel ("__init__": the package's own module, the API; "__main__": python -m perfmodel).
LAYERS = (
    ("config", "interrupt", "cache"),
    ("schema", "files", "presets", "pytree", "shapley"),
    ("hardware",),
    ("constraints", "generator"),
    ("workload",),
    ("plan",),
    ("cost",),
    ("evaluate",),
    ("knobs", "report", "trace", "reference"),
    ("uncertainty",),
    ("interop",),
    ("search",),
    ("analysis", "validate", "oracle"),
    ("calibrate",),
    ("__init__", "plots"),
    ("figures",),
    ("cli",),
    ("__main__",),
)
ROW = {room: i for i, row in enumerate(LAYERS) for room in row}


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(files: dict[str, Path]):
    """(importer, the perfmodel module it imports, the names it takes from it) for every import in
    perfmodel, at any depth of its code."""
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                base = package
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                target = (f"{base}.{node.module}" if node.module else base) if node.level else (node.module or "")
                # `from .x import y` names module x.y where there is one, else a name in module x
                pairs = [(f"{target}.{a.name}", None) if f"{target}.{a.name}" in files else (target, a.name)
                         for a in node.names]
            elif isinstance(node, ast.Import):
                pairs = [(a.name, None) for a in node.names]
            else:
                continue
            for c, taken in pairs:
                while c and c not in files:
                    c = c.rpartition(".")[0]
                if c and c != name:
                    yield name, c, taken


FILES = {_module(p): p for p in ROOT.rglob("*.py")}

IMPORTS = list(_imports(FILES))


def _graph(edges) -> dict[str, set[str]]:
    graph = {m: set() for m in FILES}
    for m, t, _ in edges:
        graph.setdefault(m, set()).add(t)
    return graph


GRAPH = _graph(IMPORTS)


def room(module: str) -> str:
    """The room of a module: perfmodel.plan.space -> plan; perfmodel -> __init__."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def upward(graph: dict[str, set[str]]) -> list[str]:
    """Every import that goes to a row below its module's or to a sibling room on its own row."""
    return sorted(f"{m} -> {t}" for m, targets in graph.items() for t in targets
                  if room(m) != room(t) and ROW[room(t)] >= ROW[room(m)])


def _cycle(graph) -> list[str] | None:
    state, stack = {}, []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state and (found := visit(m)):
                return found
        state[n] = 2
        stack.pop()
        return None

    for n in sorted(graph):
        if n not in state and (found := visit(n)):
            return found
    return None


def _diagram_rows() -> list[tuple[str, ...]]:
    """The first column of design.md's architecture diagram, one tuple of rooms per row."""
    text = DESIGN.read_text()
    block = text[text.index("## Architecture"):]
    block = block[block.index("```") + 3:]
    block = block[:block.index("```")]
    rows = []
    for line in block.splitlines():
        if line and not line[0].isspace():
            first = re.split(r"\s{2,}", line.strip())[0]
            rows.append(tuple(r.strip().rstrip("/") for r in first.split("·")))
    return rows


def test_the_graph_sees_function_level_and_relative_imports():
    # a function-level relative import the scanner must see, or the tests below prove nothing
    assert "perfmodel.plan.limits" in GRAPH["perfmodel.plan.plans"]
    assert "perfmodel.plan.space" in GRAPH["perfmodel.plan.limits"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_the_layer_check_catches_an_upward_import():
    # synthetic edges: each would break the order, and the check must name it
    assert upward({"perfmodel.hardware": {"perfmodel.search.greedy"}}) == ["perfmodel.hardware -> perfmodel.search.greedy"]
    assert upward({"perfmodel.search.codesign": {"perfmodel.analysis.sweep"}})       # a row below
    assert upward({"perfmodel.report": {"perfmodel.trace"}})                          # a sibling
    assert upward({"perfmodel.cost.schedule": {"perfmodel.evaluate"}})
    # and passes what goes down, or stays inside one room
    assert upward({"perfmodel.search.codesign": {"perfmodel.knobs", "perfmodel.search.greedy"},
                   "perfmodel.cli.search": {"perfmodel"}}) == []


def test_the_diagram_is_the_layer_list():
    assert tuple(_diagram_rows()) == LAYERS


def test_every_room_sits_on_one_row():
    rooms = [r for row in LAYERS for r in row]
    assert len(rooms) == len(set(rooms))
    assert {room(m) for m in FILES} == set(rooms)


def test_no_import_goes_up_or_sideways():
    assert upward(GRAPH) == []


def test_no_import_circle():
    assert _cycle(GRAPH) is None


# modules allowed a private name of another: none
PRIVATE_EXCEPTIONS: set = set()


def private_imports(imports) -> list[str]:
    """Every import of a private name (`_x`, not `__x__`) from another perfmodel module."""
    return sorted(f"{m} imports {taken} from {t}" for m, t, taken in imports
                  if taken and taken.startswith("_") and not taken.startswith("__")
                  and (m, t, taken) not in PRIVATE_EXCEPTIONS)


def test_the_private_name_check_catches_one(tmp_path):
    (tmp_path / "a.py").write_text("from .b import _hidden, shown\nfrom . import b\n")
    (tmp_path / "b.py").write_text("_hidden = shown = 1\n")
    edges = list(_imports({"perfmodel.a": tmp_path / "a.py", "perfmodel.b": tmp_path / "b.py"}))
    assert private_imports(edges) == ["perfmodel.a imports _hidden from perfmodel.b"]


def test_no_module_imports_another_modules_private_name():
    assert private_imports(IMPORTS) == []
