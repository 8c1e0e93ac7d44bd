"""The house's layers: no import circle among perfmodel's modules (imports inside functions
counted), and the model's core imports nothing from the layers built on it."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "perfmodel"
# the model: what a step costs on a machine for a plan
CORE = ("config", "schema", "files", "interrupt", "cache", "hardware", "workload", "constraints", "plan", "cost", "evaluate")
# what is built on it
UPPER = ("search", "analysis", "interop", "validate", "calibrate", "reference", "cli", "plots", "figures",
         "trace", "report", "oracle")


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph() -> dict[str, set[str]]:
    """module -> the perfmodel modules it imports (at any depth of its code)."""
    files = {_module(p): p for p in ROOT.rglob("*.py")}
    graph = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        out = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                base = package
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                target = (f"{base}.{node.module}" if node.module else base) if node.level else (node.module or "")
                # `from .x import y` names module x.y where there is one, else a name in module x
                cands = [f"{target}.{a.name}" if f"{target}.{a.name}" in files else target for a in node.names]
            elif isinstance(node, ast.Import):
                cands = [a.name for a in node.names]
            else:
                continue
            for c in cands:
                while c and c not in files:
                    c = c.rpartition(".")[0]
                if c and c != name:
                    out.add(c)
        graph[name] = out
    return graph


GRAPH = _graph()


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


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


def test_the_graph_sees_function_level_and_relative_imports():
    # a function-level relative import the scanner must see, or the circle test below proves nothing
    assert "perfmodel.plan.limits" in GRAPH["perfmodel.plan.plans"]
    assert "perfmodel.plan.space" in GRAPH["perfmodel.plan.limits"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_circle():
    assert _cycle(GRAPH) is None


@pytest.mark.parametrize("core", CORE)
def test_the_core_imports_nothing_built_on_it(core):
    bad = sorted(f"{m} -> {t}" for m, targets in GRAPH.items() if _layer(m) == core
                 for t in targets if _layer(t) in UPPER)
    assert not bad
