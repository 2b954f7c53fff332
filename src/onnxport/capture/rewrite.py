"""Rewrite a Python ``if`` on a tensor value into ``torch.cond``, on the AST of one function.

``FunctionRewrite`` holds the current AST of a user function; each call of ``rewrite_at(line)`` turns
the ``if`` statement (or ``a if t else b`` expression) whose test is on that line into a call of
``onnxport.capture._runtime.cond`` with two nested branch functions (a ``while`` goes to
``rewrite_loop``, and ``rewrite_data(line)`` to ``rewrite_data``), and ``compile()`` gives the new
code object with the original file name and line numbers, so a later failure inside a branch points
at the user's own line again.
"""

from __future__ import annotations

import __future__
import ast
import inspect
import linecache
import textwrap
import types
from typing import Any

from onnxport.capture import rewrite_data, rewrite_len, rewrite_loop
from onnxport.capture._syntax import RT, Rewrite, RewriteRefused, loaded, predicate, rt, stored, walk_scope

__all__ = ["FunctionRewrite", "Rewrite", "RewriteRefused"]

_FUTURE_FLAGS = [getattr(__future__, f).compiler_flag for f in __future__.all_feature_names]


def _always_returns(body: list[ast.stmt]) -> bool:
    if not body:
        return False
    last = body[-1]
    if isinstance(last, (ast.Return, ast.Raise)):
        return True
    if isinstance(last, ast.If):
        return _always_returns(last.body) and _always_returns(last.orelse)
    return False


def _has_return(body: list[ast.stmt]) -> bool:
    return any(isinstance(n, ast.Return) for stmt in body for n in [stmt, *walk_scope(stmt)])


def _written_items(branches: list[ast.stmt], defined: set[str]) -> list[str]:
    """Variables from before the ``if`` whose items a branch writes (``x[mask] = 1``, ``x[i] += v``) and
    which that branch does not rebind: the rewrite gives the branch its own copy and writes it back."""
    rebound = set(stored(branches))
    found: dict[str, None] = {}
    for stmt in branches:
        for n in [stmt, *walk_scope(stmt)]:
            if isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store):
                base = n.value
                while isinstance(base, ast.Subscript):
                    base = base.value
                if isinstance(base, ast.Name) and base.id in defined and base.id not in rebound:
                    found.setdefault(base.id)
    return list(found)


def _owning(branch: list[ast.stmt], written: list[str]) -> list[ast.stmt]:
    """``branch`` starting with its own copy of each ``written`` variable whose items it writes."""
    own = [w for w in written
           if any(isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store) for s in branch for n in [s, *walk_scope(s)]
                  if _root_name(n) == w)]
    copies = [ast.parse(f"{w} = {RT}.own_copy({w})").body[0] for w in own]
    return copies + branch if copies else branch


def _root_name(n: ast.AST) -> str | None:
    base = n.value if isinstance(n, ast.Subscript) else None
    while isinstance(base, ast.Subscript):
        base = base.value
    return base.id if isinstance(base, ast.Name) else None


class FunctionRewrite:
    """The evolving AST of one user function whose ``if``/``while`` statements and ``.data`` uses are
    being rewritten."""

    def __init__(self, fn: types.FunctionType):
        self.fn = fn
        self.code = fn.__code__
        self.file = self.code.co_filename
        try:
            source = textwrap.dedent(inspect.getsource(fn))
        except (OSError, TypeError) as exc:
            raise RewriteRefused(
                f"the source of {fn.__qualname__} is not available to rewrite ({exc}); "
                "define the model in a .py file",
                self.code.co_firstlineno,
            ) from None
        tree = ast.parse(source)
        ast.increment_lineno(tree, self.code.co_firstlineno - 1)
        func = tree.body[0]
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            raise RewriteRefused(f"{fn.__qualname__} is not a plain function definition", self.code.co_firstlineno)
        func.decorator_list = []
        self.func = func
        self.rewrites: list[Rewrite] = []

    # -- finding the test ------------------------------------------------------------------------

    def parents(self) -> dict[int, tuple[list[ast.stmt], ast.AST]]:
        """``id(stmt) -> (the statement list holding it, the innermost function around it)``."""
        found: dict[int, tuple[list[ast.stmt], ast.AST]] = {}

        def visit(node: ast.AST, scope: ast.AST) -> None:
            for field in ("body", "orelse", "finalbody"):
                block = getattr(node, field, None)
                if isinstance(block, list):
                    for stmt in block:
                        if isinstance(stmt, ast.stmt):
                            found[id(stmt)] = (block, scope)
            for child in ast.iter_child_nodes(node):
                visit(child, child if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) else scope)

        visit(self.func, self.func)
        return found

    def _scope_of(self, target: ast.AST) -> ast.AST:
        best: ast.AST = self.func
        for node in ast.walk(self.func):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and any(n is target for n in ast.walk(node)):
                if node.lineno >= best.lineno:
                    best = node
        return best

    def rewrite_at(self, line: int) -> Rewrite:
        """Rewrite the ``if`` (or conditional expression) whose test is on ``line``."""
        ifs = [n for n in ast.walk(self.func) if isinstance(n, ast.If) and n.test.lineno <= line <= n.test.end_lineno]
        if ifs:
            return self._rewrite_if(max(ifs, key=lambda n: n.lineno), line)
        exps = [n for n in ast.walk(self.func) if isinstance(n, ast.IfExp) and n.test.lineno <= line <= n.test.end_lineno]
        if exps:
            return self._rewrite_ifexp(max(exps, key=lambda n: n.lineno), line)
        loops = [
            n for n in ast.walk(self.func) if isinstance(n, ast.While) and n.test.lineno <= line <= n.test.end_lineno
        ]
        if loops:
            return rewrite_loop.rewrite_while(self, max(loops, key=lambda n: n.lineno), line)
        if any(isinstance(n, ast.Assert) and n.lineno == line for n in ast.walk(self.func)):
            raise RewriteRefused(
                "the data-dependent decision is an assert, not an if",
                line,
                "use torch._check(cond, lambda: msg) or move the check out of forward",
            )
        raise RewriteRefused(
            "the data-dependent decision on this line is not an `if` statement or conditional expression "
            "(bool()/int() of a tensor, `and`/`or` outside an if, or a call that inspects tensor values)",
            line,
        )

    def rewrite_data(self, line: int) -> Rewrite:
        """Read every ``t.data`` on ``line`` as ``t.detach()`` (see ``rewrite_data``)."""
        return rewrite_data.rewrite_data(self, line)

    def rewrite_len(self, line: int) -> Rewrite:
        """Read every ``len(t)`` on ``line`` as ``t.shape[0]`` (see ``rewrite_len``)."""
        return rewrite_len.rewrite_len(self, line)

    # -- if statements ---------------------------------------------------------------------------

    def _rewrite_if(self, node: ast.If, line: int) -> Rewrite:
        parents = self.parents()
        block, scope = parents[id(node)]
        index = next(i for i, s in enumerate(block) if s is node)
        before = self.source(node.lineno, node.end_lineno)
        body, orelse = list(node.body), list(node.orelse)
        rest = block[index + 1 :]
        returns_body, returns_else = _always_returns(body), _always_returns(orelse)
        moved: list[ast.stmt] = []
        if returns_body != returns_else and (_has_return(body) or _has_return(orelse)):
            moved = self._fall_through(rest, block is getattr(scope, "body", None), node.lineno)
            if returns_body:
                orelse = orelse + moved
            else:
                body = body + moved
        mode = "return" if _always_returns(body) and _always_returns(orelse) else "assign"
        defined = self.defined_before(scope, node)
        written = [] if mode == "return" else _written_items(body + orelse, defined)
        for branch, name in ((body, "true"), (orelse, "false")):
            self._check_branch(branch, name, node.lineno, written)
        if mode == "assign" and (_has_return(body) or _has_return(orelse)):
            raise RewriteRefused("a branch returns on some paths only", node.lineno, self._suggest(node))
        outputs: list[str] = []
        if mode == "assign":
            outputs = self._outputs(scope, node, body, orelse, defined, written)
            body, orelse = _owning(body, written), _owning(orelse, written)
        inputs = self.inputs(scope, loaded(body + orelse) | set(outputs), defined)
        site = f"{self.file}:{line}"
        true_def = self._branch_def(f"__onnxport_true_{node.lineno}", inputs, body, outputs)
        false_def = self._branch_def(f"__onnxport_false_{node.lineno}", inputs, orelse or [ast.Pass()], outputs)
        call = self._cond_call(node.test, true_def.name, false_def.name, inputs, site)
        if mode == "return":
            result: ast.stmt = ast.Return(call)
        elif len(outputs) == 1:
            result = ast.Assign([ast.Name(outputs[0], ast.Store())], call)
        else:
            result = ast.Assign([ast.Tuple([ast.Name(o, ast.Store()) for o in outputs], ast.Store())], call)
        # an item written in a branch (``x[mask] = 1``) goes back into the tensor it was written into, which
        # the caller may hold too: what eager PyTorch's in-place write leaves there
        keep = [ast.parse(f"__onnxport_before_{w} = {w}").body[0] for w in written]
        back = [ast.parse(f"{w} = {RT}.write_back(__onnxport_before_{w}, {w})").body[0] for w in written]
        new = [true_def, false_def, *keep, result, *back]
        for stmt in new:
            ast.copy_location(stmt, node)
        block[index : index + 1 + len(moved)] = new
        ast.fix_missing_locations(self.func)
        if moved:
            before += self.source(moved[0].lineno, moved[-1].end_lineno)
        return self.record(line, before, new)

    def _fall_through(self, rest: list[ast.stmt], top_level: bool, line: int) -> list[ast.stmt]:
        """The statements after an early-returning ``if``: they become the other branch."""
        if _always_returns(rest):
            return list(rest)
        if top_level:
            return [*rest, ast.Return(ast.Constant(None))]
        raise RewriteRefused("an early return inside a nested block falls through to code outside it", line)

    def _check_branch(self, branch: list[ast.stmt], name: str, line: int, written: list[str] = ()) -> None:
        loops = [n for s in branch for n in [s, *walk_scope(s)] if isinstance(n, (ast.For, ast.While, ast.AsyncFor))]
        in_loop = {id(n) for loop in loops for n in ast.walk(loop)}
        local = set(stored(branch)) | set(written)
        for stmt in branch:
            for n in [stmt, *walk_scope(stmt)]:
                problem = ""
                if isinstance(n, (ast.Break, ast.Continue)) and id(n) not in in_loop:
                    problem = f"`{type(n).__name__.lower()}` leaves the enclosing loop from inside the {name} branch"
                elif isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await)):
                    problem = f"the {name} branch yields or awaits"
                elif isinstance(n, (ast.Global, ast.Nonlocal)):
                    problem = f"the {name} branch rebinds a {type(n).__name__.lower()} name (a side effect on Python state)"
                elif isinstance(n, (ast.Attribute, ast.Subscript)) and isinstance(n.ctx, ast.Store):
                    base = n.value
                    while isinstance(base, (ast.Attribute, ast.Subscript)):
                        base = base.value
                    if not (isinstance(base, ast.Name) and base.id in local):
                        problem = (
                            f"the {name} branch assigns `{ast.unparse(n)}` (a side effect on Python state or an "
                            "in-place change of an input; torch.cond branches must be pure)"
                        )
                if problem:
                    raise RewriteRefused(problem, line)

    def defined_before(self, scope: ast.AST, node: ast.If) -> set[str]:
        """Parameters of the enclosing function and names it binds before ``node``."""
        args = scope.args
        params = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
        params |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
        bound = {
            n.id
            for n in walk_scope(scope)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.lineno < node.lineno
        }
        return params | bound

    @staticmethod
    def inputs(scope: ast.AST, read: set[str], defined: set[str]) -> list[str]:
        """The enclosing function's variables a branch reads, its own parameters first, in their order.

        Zero-argument ``super()`` reads the first parameter without naming it, so it comes along too.
        """
        params = [a.arg for a in [*scope.args.posonlyargs, *scope.args.args]]
        if "super" in read and params:
            read = read | {params[0]}
        names = read & defined
        return [p for p in params if p in names] + sorted(names - set(params))

    def _outputs(
        self, scope: ast.AST, node: ast.If, body: list[ast.stmt], orelse: list[ast.stmt], defined: set[str],
        written: list[str] = (),
    ) -> list[str]:
        """Names the branches assign that code after the ``if`` (or a loop around it) reads, and the
        variables whose items they write (``written``)."""
        in_body, in_else = stored(body), stored(orelse)
        after = {
            n.id
            for n in walk_scope(scope)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.lineno > node.end_lineno
        }
        # The return that a generated branch function adds reads its outputs after every statement in it.
        after |= loaded([n for n in walk_scope(scope) if getattr(n, "onnxport_reads_after", False)])
        for loop in (n for n in walk_scope(scope) if isinstance(n, (ast.For, ast.While))):
            if any(n is node for n in ast.walk(loop)):
                after |= loaded([loop])
        outputs = [n for n in dict.fromkeys(in_body + in_else) if n in after and n not in written] + list(written)
        for name in outputs:
            if name not in defined and (name not in in_body or name not in in_else):
                branch = "true" if name in in_body else "false"
                raise RewriteRefused(
                    f"`{name}` is assigned in the {branch} branch only and used after the if",
                    node.lineno,
                    f"give `{name}` a value before the if, or assign it in both branches",
                )
        if not outputs:
            raise RewriteRefused("the branches compute nothing that is used after the if", node.lineno)
        return outputs

    # -- conditional expressions -----------------------------------------------------------------

    def _rewrite_ifexp(self, node: ast.IfExp, line: int) -> Rewrite:
        scope = self._scope_of(node)
        if isinstance(scope, ast.Lambda):
            raise RewriteRefused("the conditional expression is inside a lambda", line)
        stmt = next(s for s in ast.walk(self.func) if isinstance(s, ast.stmt) and any(n is node for n in ast.walk(s)) and not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)))
        before = self.source(stmt.lineno, stmt.end_lineno)
        defined = self.defined_before(scope, stmt) if not isinstance(scope, ast.Lambda) else set()
        inputs = self.inputs(scope, loaded([node.body, node.orelse]), defined)
        params = ast.arguments(posonlyargs=[], args=[ast.arg(n) for n in inputs], kwonlyargs=[], kw_defaults=[], defaults=[])
        call = self._cond_call(node.test, ast.Lambda(params, node.body), ast.Lambda(params, node.orelse), inputs, f"{self.file}:{line}")
        for parent in ast.walk(stmt):
            for field, value in ast.iter_fields(parent):
                if value is node:
                    setattr(parent, field, call)
                elif isinstance(value, list) and any(v is node for v in value):
                    value[[i for i, v in enumerate(value) if v is node][0]] = call
        ast.copy_location(call, node)
        ast.fix_missing_locations(self.func)
        return self.record(line, before, [stmt])

    # -- building blocks -------------------------------------------------------------------------

    @staticmethod
    def _branch_def(name: str, inputs: list[str], body: list[ast.stmt], outputs: list[str]) -> ast.FunctionDef:
        body = list(body)
        if outputs:
            value = ast.Name(outputs[0], ast.Load()) if len(outputs) == 1 else ast.Tuple([ast.Name(o, ast.Load()) for o in outputs], ast.Load())
            ret = ast.Return(value)
            ret.onnxport_reads_after = True  # type: ignore[attr-defined]  # see _outputs
            body.append(ret)
        params = ast.arguments(posonlyargs=[], args=[ast.arg(n) for n in inputs], kwonlyargs=[], kw_defaults=[], defaults=[])
        return ast.FunctionDef(name=name, args=params, body=body, decorator_list=[], returns=None, type_params=[])

    def _cond_call(self, test: ast.expr, true_fn: ast.expr | str, false_fn: ast.expr | str, inputs: list[str], site: str) -> ast.Call:
        fns = [ast.Name(f, ast.Load()) if isinstance(f, str) else f for f in (true_fn, false_fn)]
        env = ast.Dict([ast.Constant(n) for n in inputs], [ast.Name(n, ast.Load()) for n in inputs])
        return ast.Call(rt("cond"), [predicate(test), *fns, env, ast.Constant(site)], [])

    def source(self, first: int, last: int) -> str:
        return "".join(linecache.getline(self.file, i) for i in range(first, last + 1))

    def record(self, line: int, before: str, new: list[ast.AST], kind: str = "if") -> Rewrite:
        after = "\n".join(ast.unparse(n) for n in new)
        rewrite = Rewrite(self.file, line, self.fn.__qualname__, textwrap.dedent(before), after, kind)
        self.rewrites.append(rewrite)
        return rewrite

    def _suggest(self, node: ast.If) -> str:
        return (
            "write it as torch.cond(pred, true_fn, false_fn, (tensors,)) where both functions return "
            f"the same tensors; the test was `{ast.unparse(node.test)}`"
        )

    def owner_class(self) -> str:
        """The name of the class a method was defined in ('' for a plain function)."""
        parts = self.fn.__qualname__.split(".")
        return parts[-2] if len(parts) >= 2 and parts[-2] != "<locals>" else ""

    # -- compiling -------------------------------------------------------------------------------

    def compile(self) -> types.CodeType:
        """The rewritten function's code object (same file, names, free variables and flags)."""
        func = self.func
        freevars = list(self.code.co_freevars)
        top: ast.stmt = func
        if freevars:  # rebuild the closure: a factory whose parameters are the original free variables
            params = ast.arguments(posonlyargs=[], args=[ast.arg(n) for n in freevars], kwonlyargs=[], kw_defaults=[], defaults=[])
            top = ast.FunctionDef("_onnxport_factory", params, [func, ast.Return(ast.Name(func.name, ast.Load()))], [], None, type_params=[])
        owner = self.owner_class()
        if owner:  # compile inside a class of the same name, so `self.__x` is mangled as in the original
            top = ast.ClassDef(owner, [], [], [top], [], type_params=[])
        module = ast.Module([ast.copy_location(top, func)], type_ignores=[])
        ast.fix_missing_locations(module)
        flags = sum(f for f in _FUTURE_FLAGS if self.code.co_flags & f)
        code = compile(module, self.file, "exec", flags=flags, dont_inherit=True)
        namespace: dict[str, Any] = {}
        exec(code, self.fn.__globals__, namespace)  # noqa: S102 - the user's own function, rewritten
        if owner:
            namespace = dict(vars(namespace[owner]))
        if freevars:
            cells = [c.cell_contents for c in self.fn.__closure__ or ()]
            new_fn = namespace["_onnxport_factory"](*cells)
        else:
            new_fn = namespace[func.name]
        new_code = new_fn.__code__
        if new_code.co_freevars != self.code.co_freevars:
            raise RewriteRefused(
                f"rewriting {self.fn.__qualname__} changed its free variables "
                f"({self.code.co_freevars} -> {new_code.co_freevars})",
                self.code.co_firstlineno,
            )
        return new_code.replace(co_name=self.code.co_name, co_qualname=self.code.co_qualname)
