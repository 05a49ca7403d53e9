"""The simulated APIs of BFCL multi-turn (file system, trading bot, travel, ...) and how calls run on them.

The classes are the wheel's own ``func_source_code/*.py``, loaded from the located data folder under a
private module name (never by installing ``bfcl-eval``): their one internal import, of ``long_context``, is
pointed at the same private package. They run in the host process, so a file is run only when it is byte
for byte the pinned wheel's original (:func:`~lopd_envs.suites.bfcl.data.verified_source`): a modified or
truncated copy in a user's data folder is refused with its path, never imported.

A call arrives as the call string the official checker builds (``cd(folder='temp')``), and is run with the
checker's rules: method names are bound to the instance of the class that has them (in the order of
``involved_classes``, later classes winning), calls named ``kill``, ``exit``, ``quit``, ``remove``,
``unlink``, ``popen``, ``Popen`` or ``run`` are refused, and the result is the returned string, a dict as
JSON (``str`` if not serialisable), anything else by ``str``; a failure gives
``"Error during execution: <message>"``. Where the harness ``eval``s the string, we interpret its AST:
literals, containers, arithmetic and calls of API methods only (a Python builtin such as ``print`` is an
unknown name here), with resource guards on the few methods that could otherwise run for hours
(``power`` of huge integers, ``logarithm``/``square_root`` with huge precision).

Official mode also reproduces a quirk of the harness: the method-binding rewrite is a regular expression
over the whole call string, so text inside a string argument that looks like a call of an API method
(``"run ls(a) now"``) is rewritten too, with an instance name that differs between the model's and the
ground truth's run. Strict mode binds call names only.
"""

from __future__ import annotations

import ast
import inspect
import json
import operator
import re
import sys
import threading
import types
from collections.abc import Callable
from functools import cache
from hashlib import sha1
from pathlib import Path
from typing import Any, cast

from lopd_envs.suites.bfcl.data import API_MODULES, STATELESS_APIS, api_source_path, json_copy, verified_source

_WHEEL_PACKAGE = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"
_LOCK = threading.RLock()
_CLASSES: dict[tuple[str, str], type] = {}
BLOCKED = ("kill", "exit", "quit", "remove", "unlink", "popen", "Popen", "run")


# ------------------------------------------------------------------------------ loading the classes


def _package_for(folder: Path) -> str:
    """One private package per source folder, so two data folders never share modules."""
    name = "_lopd_bfcl_api_" + sha1(str(folder.resolve()).encode()).hexdigest()[:12]
    if name not in sys.modules:
        package = types.ModuleType(name)
        package.__path__ = [str(folder)]
        sys.modules[name] = package
    return name


def _load_module(path: Path, package: str) -> types.ModuleType:
    qualified = f"{package}.{path.stem}"
    if qualified in sys.modules:
        return sys.modules[qualified]
    source = verified_source(path).replace(_WHEEL_PACKAGE, package)
    module = types.ModuleType(qualified)
    module.__file__ = str(path)
    module.__package__ = package
    sys.modules[qualified] = module
    try:
        for dependency in re.findall(rf"from {re.escape(package)}\.(\w+) import", source):
            _load_module(path.with_name(f"{dependency}.py"), package)
        exec(compile(source, str(path), "exec"), module.__dict__)
    except BaseException:
        sys.modules.pop(qualified, None)
        raise
    return module


def api_class(class_name: str, data_dir: str | None = None) -> type:
    """The simulated API class ``class_name`` (e.g. ``GorillaFileSystem``) from the located sources."""
    path = api_source_path(API_MODULES[class_name], data_dir)
    key = (str(path), class_name)
    with _LOCK:
        if key not in _CLASSES:
            module = _load_module(path, _package_for(path.parent))
            _CLASSES[key] = getattr(module, class_name)
        return _CLASSES[key]


@cache
def public_methods(cls: type) -> tuple[str, ...]:
    """Public methods, as the checker binds them (static methods are not bound)."""
    return tuple(name for name, _ in inspect.getmembers(cls, predicate=inspect.isfunction)
                 if not name.startswith("_") and not isinstance(inspect.getattr_static(cls, name), staticmethod))


def new_instances(classes: list[str], initial_config: dict[str, Any], long_context: bool,
                  data_dir: str | None = None) -> dict[str, Any]:
    """Fresh instances of the involved classes, each loaded with its part of ``initial_config``."""
    instances = {}
    for class_name in classes:
        instance = api_class(class_name, data_dir)()
        if class_name not in STATELESS_APIS:
            instance._load_scenario(json_copy(initial_config.get(class_name, {})), long_context=long_context)
        instances[class_name] = instance
    return instances


def public_state(instance: Any) -> dict[str, Any]:
    """The attributes the state check compares (those not starting with ``_``)."""
    return {k: v for k, v in vars(instance).items() if not k.startswith("_")}


# ------------------------------------------------------------------------------ running call strings


class Runner:
    """Runs call strings against one set of instances, as one "model" of the official checker does."""

    _NAME = re.compile(r"\b([a-zA-Z_]\w*)\s*(?=\()")

    def __init__(self, instances: dict[str, Any], label: str, strict: bool = False):
        self.instances = instances
        self.strict = strict
        self.by_instance_name = {f"{label}_{c.lower()}_instance": inst for c, inst in instances.items()}
        self.method_owner: dict[str, str] = {}
        for (instance_name, instance) in self.by_instance_name.items():
            for method in public_methods(type(instance)):
                self.method_owner[method] = instance_name

    def run(self, call: str) -> str:
        """Execute one call string; never raises for bad input."""
        return self.run_flagged(call)[0]

    def run_flagged(self, call: str) -> tuple[str, bool]:
        """Execute one call string: its result text, and whether the call failed (the harness's
        ``Error during execution: ...`` text). Never raises for bad input."""
        if not self.strict:
            call = self._NAME.sub(lambda m: f"{self.method_owner[m.group(1)]}.{m.group(1)}"
                                  if m.group(1) in self.method_owner else m.group(1), call)
        try:
            head = call.split("(")[0]
            if "." in head:
                head = head.split(".")[1]
            if head in BLOCKED:
                raise PermissionError(f"Function call {head} is not allowed.")
            tree = cast(ast.Expression, compile(call, "<string>", "eval", ast.PyCF_ONLY_AST))
            result = self._eval(tree.body)
        except (Exception, RecursionError) as exc:  # noqa: BLE001 - everything a model call can do wrong
            return f"Error during execution: {exc}", True
        if type(result) is str:
            return result, False
        if type(result) is dict:
            try:
                return json.dumps(result), False
            except (TypeError, ValueError, RecursionError):
                return str(result), False
        return str(result), False

    # a tiny evaluator: the subset of Python a call string can hold
    def _eval(self, node: ast.AST) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.List):
            return [self._eval(e) for e in node.elts]
        if isinstance(node, ast.Tuple):
            return tuple(self._eval(e) for e in node.elts)
        if isinstance(node, ast.Set):
            return {self._eval(e) for e in node.elts}
        if isinstance(node, ast.Dict):
            out = {}
            for k, v in zip(node.keys, node.values):
                if k is None:
                    out.update(self._eval(v))
                else:
                    out[self._eval(k)] = self._eval(v)
            return out
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _guarded(_UNARY[type(node.op)], self._eval(node.operand))
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _guarded(_BINOPS[type(node.op)], self._eval(node.left), self._eval(node.right))
        if isinstance(node, ast.Name):
            if node.id in self.by_instance_name:
                return self.by_instance_name[node.id]
            raise NameError(f"name '{node.id}' is not defined")
        if isinstance(node, ast.Call):
            func = self._callee(node.func)
            args = [self._eval(a) for a in node.args if not isinstance(a, ast.Starred)]
            kwargs: dict[str, Any] = {}
            for kw in node.keywords:
                if kw.arg is None:
                    kwargs.update(self._eval(kw.value))
                else:
                    kwargs[kw.arg] = self._eval(kw.value)
            _check_resources(func, args, kwargs)
            return func(*args, **kwargs)
        raise SyntaxError(f"unsupported expression in a call: {type(node).__name__}")

    def _callee(self, node: ast.AST) -> Callable[..., Any]:
        if isinstance(node, ast.Name):
            owner = self.method_owner.get(node.id)
            if owner is None:
                raise NameError(f"name '{node.id}' is not defined")
            return getattr(self.by_instance_name[owner], node.id)
        if isinstance(node, ast.Attribute):
            return getattr(self._eval(node.value), node.attr)
        raise TypeError(f"'{type(node).__name__}' object is not callable")


_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_, ast.Invert: operator.invert}
_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}


def _guarded(op: Callable[..., Any], *values: Any) -> Any:
    if op is operator.pow and all(isinstance(v, int) for v in values) and abs(values[1]) > 10_000 and abs(values[0]) > 1:
        raise OverflowError("exponent too large")
    if op is operator.mul and any(isinstance(v, (str, bytes, list, tuple)) for v in values):
        n = next((v for v in values if isinstance(v, int)), 0)
        seq = next(v for v in values if isinstance(v, (str, bytes, list, tuple)))
        if len(seq) * max(n, 0) > 1_000_000:
            raise MemoryError("sequence too large")
    return op(*values)


_PRECISION_LIMIT = 10_000


def _check_resources(func: Callable[..., Any], args: list, kwargs: dict) -> None:
    """Refuse the few API calls that would run (practically) forever with adversarial numbers."""
    name = getattr(func, "__name__", "")
    if name == "power":
        bound = dict(zip(("base", "exponent"), args), **kwargs)
        base, exponent = bound.get("base"), bound.get("exponent")
        if isinstance(base, int) and isinstance(exponent, int) and abs(exponent) > 10_000 and abs(base) > 1:
            raise OverflowError("exponent too large")
    elif name in ("logarithm", "square_root"):
        precision = kwargs.get("precision", args[-1] if args else None)
        if isinstance(precision, (int, float)) and precision > _PRECISION_LIMIT:
            raise OverflowError(f"precision above {_PRECISION_LIMIT} is refused")
