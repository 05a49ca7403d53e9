"""ACEBench's execution role: how a decoded agent message becomes method calls on the scenario classes,
and what comes back (``multi_step_utils.execute_agent_func_call`` and the execution roles).

Facts of the official harness that this reproduces, because they decide end states:

* every involved class is instantiated at the first execution, loaded with its own ``initial_config``
  entry and then with the ``BaseApi`` entry (so the device state of every app comes from ``BaseApi``);
* a method is run on *every* involved instance that has it, in ``involved_classes`` order (so
  ``turn_on_wifi`` switches Wi-Fi on in each app), and the last instance's return value is the result;
* a function no instance has "returns" the previous call's result of the same message, or fails with
  Python's unbound-local error when it is the first;
* exceptions become ``"Error during execution: <exception text>"``. In ``agent_multi_step`` the message's
  other calls still run; in ``agent_multi_turn`` the first error ends the message, and the harness then
  sends the literal text ``"Error during execution: {str(e)}"`` (an f-string it forgot) instead;
* results are JSON-encoded when they are dicts (integer keys become strings), ``str()``-ed otherwise,
  then decoded again where they are valid JSON;
* the saved end state is each involved class's saved attributes, taken when the episode ends, provided at
  least one message reached execution without a decode failure (``agent_multi_turn``: without an error).
"""

from __future__ import annotations

import copy
import inspect
import json
from dataclasses import dataclass, field
from typing import Any

from lopd_envs.suites.acebench.decode import Call
from lopd_envs.suites.acebench.scenarios import SCENARIOS, Scenario

ERROR_PREFIX = "Error during execution: "
UNBOUND = "cannot access local variable 'func_call_result' where it is not associated with a value"
MULTI_TURN_ERROR = "Error during execution: {str(e)}"


def format_result(value: Any) -> Any:
    """A method's return value as the agent receives it."""
    if isinstance(value, str):
        text = value
    elif isinstance(value, dict):
        try:
            text = json.dumps(value)
        except (TypeError, ValueError):
            text = str(value)
    else:
        text = str(value)
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return text


def _nested_call_error(arguments: dict[str, Any]) -> str | None:
    """The harness writes a dict-valued argument back as a call (``{'f': {...}}`` → ``f(...)``) and then
    evaluates it, which fails on the unknown name."""
    for value in arguments.values():
        if isinstance(value, dict) and value:
            return f"name '{next(iter(value))}' is not defined"
    return None


@dataclass
class Batch:
    """One message's execution: the results the agent sees (one per call, or the multi-turn error text)
    and whether the batch counts for the saved end state."""

    results: list[Any] = field(default_factory=list)
    error: str | None = None
    recorded: bool = True
    failed: list[bool] = field(default_factory=list)  # paired with results: True where the call raised


class Executor:
    """The scenario instances of one episode and the official call semantics on them."""

    def __init__(self, involved_classes: list[str], initial_config: dict[str, Any], language: str,
                 stop_on_error: bool):
        self.involved_classes = list(involved_classes)
        self.initial_config = copy.deepcopy(initial_config)
        self.language = language
        self.stop_on_error = stop_on_error
        self.instances: dict[str, Scenario] | None = None
        self.recorded = False
        self._methods: dict[str, list[Scenario]] = {}

    def _start(self) -> None:
        self.instances = {}
        for name in self.involved_classes:
            instance = SCENARIOS[name](self.language)
            instance._load_scenario(copy.deepcopy(self.initial_config.get(name, {})))
            instance._load_scenario(copy.deepcopy(self.initial_config.get("BaseApi", {})))
            self.instances[name] = instance
            hidden = type(instance).UNAVAILABLE.get(self.language, frozenset())
            for method, _ in inspect.getmembers(instance, predicate=inspect.ismethod):
                if not method.startswith("_") and method not in hidden:
                    self._methods.setdefault(method, []).append(instance)

    def methods(self) -> list[str]:
        if self.instances is None:
            self._start()
        return sorted(self._methods)

    def _call(self, call: Call) -> Any:
        name, arguments = next(iter(call.items()))
        nested = _nested_call_error(arguments)
        if None in arguments:
            raise SyntaxError("invalid syntax")
        result = _Missing
        for instance in self._methods.get(name, []):
            if nested:
                raise NameError(nested)
            result = getattr(instance, name)(**arguments)
        return result

    def execute(self, calls: list[Call]) -> Batch:
        """Run one decoded message's calls."""
        if self.instances is None:
            self._start()
        batch, previous = Batch(), _Missing
        for call in calls:
            try:
                result = self._call(call)
                if result is _Missing:
                    if previous is _Missing:
                        raise UnboundLocalError(UNBOUND)
                    result = previous
                previous = result
                batch.results.append(format_result(result))
                batch.failed.append(False)
            except Exception as exc:  # noqa: BLE001 - the harness turns every exception into text
                if self.stop_on_error:
                    return Batch([MULTI_TURN_ERROR], error=f"{type(exc).__name__}: {exc}", recorded=False,
                             failed=[True])
                batch.results.append(ERROR_PREFIX + str(exc))
                batch.failed.append(True)
                batch.error = batch.error or f"{type(exc).__name__}: {exc}"
        self.recorded = True
        return batch

    def state(self) -> list[dict[str, Any]]:
        """The saved end state as the official result file holds it (after its JSON round trip); empty
        when no message was ever recorded."""
        if not self.recorded or self.instances is None:
            return []
        snapshot = [{name: instance._state()} for name, instance in self.instances.items()]
        return json.loads(json.dumps(snapshot, ensure_ascii=False, default=str))


class _MissingType:
    def __repr__(self) -> str:
        return "<no result>"


_Missing: Any = _MissingType()
