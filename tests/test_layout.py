"""The layout of the source: imports between onnxport's modules run one way (no module reaches itself through
others, counting imports inside functions, not those under ``TYPE_CHECKING``), and no module imports a private
name (``_name``) of another; every op translation names its op in the source (grep finds it), and each op
module's tests are in a test file of its name. Read from the source text with ``ast``: nothing is imported."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SOURCE = Path(__file__).resolve().parent.parent / "src"
OP_TESTS = Path(__file__).resolve().parent / "ops"
OPS = SOURCE / "onnxport" / "translate" / "ops"
NAMESPACES = ("aten_", "torch", "ops", "operator", "math")  # where the ops a translation registers are found


def _modules() -> dict[str, Path]:
    modules = {}
    for path in sorted((SOURCE / "onnxport").rglob("*.py")):
        name = ".".join(path.relative_to(SOURCE).with_suffix("").parts)
        modules[name.removesuffix(".__init__")] = path
    return modules


def _target(module: str, path: Path, node: ast.ImportFrom) -> str | None:
    if not node.level:
        return node.module
    base = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(modules: dict[str, Path]) -> tuple[dict[str, set[str]], list[str]]:
    """Each module's onnxport imports (the modules it reads), and the private names imported across modules."""
    edges: dict[str, set[str]] = defaultdict(set)
    private = []
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typing_only = {id(inner) for node in ast.walk(tree) if isinstance(node, ast.If)
                       and "TYPE_CHECKING" in ast.unparse(node.test) for inner in ast.walk(node)}
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "onnxport" and alias.name != module:
                        edges[module].add(alias.name if alias.name in modules else alias.name.rsplit(".", 1)[0])
            elif isinstance(node, ast.ImportFrom):
                target = _target(module, path, node)
                if not target or target.split(".")[0] != "onnxport":
                    continue
                for alias in node.names:
                    full = f"{target}.{alias.name}"
                    read = full if full in modules else target
                    if read != module:
                        edges[module].add(read)
                    if alias.name.startswith("_") and not alias.name.startswith("__") and full not in modules \
                            and target != module:
                        private.append(f"{module} imports {alias.name} from {target} (line {node.lineno})")
    return edges, private


def _circles(modules: dict[str, Path], edges: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that reach one another (strongly connected components larger than one)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in modules:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in modules:
        if module not in index:
            visit(module)
    return found


def test_imports_run_one_way() -> None:
    modules = _modules()
    edges, _ = _imports(modules)
    circles = _circles(modules, edges)
    assert not circles, "modules that import one another, through others or directly:\n" + "\n".join(
        " <-> ".join(group) + "\n  " + "\n  ".join(f"{a} -> {b}" for a in group for b in sorted(edges[a]) if b in group)
        for group in circles)


def test_no_private_name_is_imported_from_another_module() -> None:
    _, private = _imports(_modules())
    assert not private, "\n".join(private)


def test_the_checks_see_a_circle_and_a_private_import(tmp_path) -> None:
    """The checks themselves: two modules that import each other, one of them a private name."""
    (tmp_path / "onnxport").mkdir()
    (tmp_path / "onnxport" / "__init__.py").write_text("")
    (tmp_path / "onnxport" / "a.py").write_text("def f():\n    from onnxport.b import _g\n")
    (tmp_path / "onnxport" / "b.py").write_text("from onnxport import a\n")
    global SOURCE
    saved, SOURCE = SOURCE, tmp_path
    try:
        modules = _modules()
        edges, private = _imports(modules)
        assert _circles(modules, edges) == [["onnxport.a", "onnxport.b"]]
        assert private == ["onnxport.a imports _g from onnxport.b (line 2)"]
    finally:
        SOURCE = saved


def _ops_by_computed_name(path: Path) -> list[str]:
    """``getattr(<op namespace>, <not a literal>)`` in ``path``: an op found by a name built at run time."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" \
                and len(node.args) >= 2 and ast.unparse(node.args[0]).split(".")[0] in NAMESPACES \
                and not isinstance(node.args[1], ast.Constant):
            found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_every_translation_names_its_op() -> None:
    """Each op is written out where it is registered (``aten_.sqrt.default``, ``torch.sym_max``), so a grep for
    its name finds its translation."""
    found = [line for path in sorted(OPS.glob("*.py")) for line in _ops_by_computed_name(path)]
    assert not found, "ops found by a computed name:\n" + "\n".join(found)


def test_each_op_module_has_a_test_file_of_its_name() -> None:
    modules = {path.stem for path in OPS.glob("*.py") if not path.stem.startswith("_")}
    missing = sorted(name for name in modules if not (OP_TESTS / f"test_{name}.py").is_file())
    assert not missing, f"op modules without tests/ops/test_<name>.py: {', '.join(missing)}"


def test_a_computed_op_name_is_seen(tmp_path) -> None:
    (tmp_path / "unary.py").write_text("for name in NAMES:\n    aten(getattr(aten_, name).default)(f)\n"
                                       "aten(getattr(aten_, 'sqrt').default)(f)\n")
    assert _ops_by_computed_name(tmp_path / "unary.py") == ["unary.py:2: getattr(aten_, name)"]
