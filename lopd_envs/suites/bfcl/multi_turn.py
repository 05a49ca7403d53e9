"""The official multi-turn checker, followed turn by turn while an episode runs.

The official checker (``multi_turn_checker``) replays a finished conversation: for every turn it runs the
model's decoded calls of that turn, then the turn's ground-truth calls, each on its own instances of the
involved API classes that live for the whole entry, and stops at the first failing turn:

- a turn with ground truth but no model call fails (``multi_turn:empty_turn_model_response``);
- a turn without ground truth is not checked (its calls still change the state seen later);
- otherwise every instance's public attributes must equal the ground truth's
  (``multi_turn:instance_state_mismatch``), and every ground-truth result of the turn must appear among
  the model's results of *all* turns so far, as a multiset, in any order
  (``multi_turn:execution_response_mismatch``).
An entry whose model was force-terminated before its last turn fails as a whole
(``multi_turn:force_terminated``).

The simulated APIs are deterministic, so running the model's calls as they arrive gives the same
instances and results as the checker's replay; the ground truth of a turn is run when the turn ends.
"""

from __future__ import annotations

from typing import Any

from lopd_envs.suites.bfcl.api import Runner, new_instances

_MISSING = object()


def compare_instances(model: Any, truth: Any) -> dict[str, dict[str, Any]]:
    """Public attributes of ``truth`` whose values differ on ``model`` (the state check)."""
    differences = {}
    for name, expected in vars(truth).items():
        if name.startswith("_"):
            continue
        got = getattr(model, name, _MISSING)
        if got is _MISSING or got != expected:
            differences[name] = {"model": None if got is _MISSING else got, "ground_truth": expected}
    return differences


def missing_results(expected: list[str], produced: list[str]) -> list[str]:
    """Ground-truth results not found among the produced ones, each produced result used once."""
    pool = list(produced)
    missing = []
    for item in expected:
        try:
            pool.remove(item)
        except ValueError:
            missing.append(item)
    return missing


class MultiTurnScorer:
    """Runs the model's calls, and checks each turn against the ground truth when it ends."""

    def __init__(self, entry: dict[str, Any], ground_truth: list[list[str]], data_dir: str | None,
                 strict: bool = False):
        self.entry_id = entry["id"]
        self.ground_truth = ground_truth
        self.strict = strict
        classes, config = entry["involved_classes"], entry.get("initial_config", {})
        long_context = "long_context" in self.entry_id.rsplit("_", 1)[0]
        self.model = Runner(new_instances(classes, config, long_context, data_dir),
                            f"lopd_eval_{self.entry_id}", strict)
        self.truth = Runner(new_instances(classes, config, long_context, data_dir),
                            f"lopd_ground_truth_eval_{self.entry_id}", strict)
        self.turns_done = 0
        self.turn_steps: list[list[str]] = []
        self.all_results: list[str] = []
        self.execution_results: list[dict[str, Any]] = []
        self.failure: dict[str, Any] | None = None

    def execute(self, calls: list[str]) -> tuple[list[str], list[bool]]:
        """One model step: its call strings, run on the model's instances. Returns each call's result and
        whether it failed."""
        outcomes = [self.model.run_flagged(c) for c in calls]
        results = [text for text, _ in outcomes]
        self.turn_steps.append(results)
        self.all_results.extend(results)
        return results, [failed for _, failed in outcomes]

    def end_turn(self) -> None:
        turn = self.turns_done
        if self.failure is None and turn < len(self.ground_truth):
            self.failure = self._check_turn(turn)
        self.turns_done += 1
        self.turn_steps = []

    def _check_turn(self, turn: int) -> dict[str, Any] | None:
        gold_calls = self.ground_truth[turn]
        gold_results = [self.truth.run(c) for c in gold_calls]
        self.execution_results.append({"model": self.turn_steps, "ground_truth": gold_results})
        if gold_calls and not self.turn_steps:
            return {"error_message": f"Model response list is empty for turn {turn}",
                    "error_type": "multi_turn:empty_turn_model_response", "turn": turn}
        if not gold_calls:
            if self.strict and self.turn_steps:
                return {"error_message": f"Model outputs valid function calls when it should not for turn {turn}.",
                        "error_type": "multi_turn:irrelevance_error:decoder_success", "turn": turn}
            return None
        for class_name, truth in self.truth.instances.items():
            differences = compare_instances(self.model.instances[class_name], truth)
            if differences:
                return {"error_message": f"Model instance for {class_name} does not match the state with "
                                         "ground truth instance.",
                        "error_type": "multi_turn:instance_state_mismatch", "turn": turn,
                        "details": {"differences": differences}}
        missing = missing_results(gold_results, self.all_results)
        if missing:
            return {"error_message": f"Model response execution results so far does not contain all the ground "
                                     f"truth response execution results for turn {turn}.",
                    "error_type": "multi_turn:execution_response_mismatch", "turn": turn,
                    "details": {"missing_items": missing}}
        return None

    def result(self, force_quit: bool) -> dict[str, Any]:
        """The official verdict for the conversation so far (``valid`` plus the failure, if any)."""
        n_gold = len(self.ground_truth)
        if self.turns_done != n_gold or (self.strict and force_quit):
            return {"valid": False, "error_type": "multi_turn:force_terminated",
                    "error_message": f"Model was force-terminated during inference phase. The length of the model "
                                     f"result turns ({self.turns_done}) does not match the length of the ground "
                                     f"truth turns ({n_gold})." if self.turns_done != n_gold else
                                     "Model was force-terminated on the last turn (strict mode fails it)."}
        if self.failure:
            return {"valid": False, **self.failure}
        return {"valid": True}
