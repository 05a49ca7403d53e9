"""ACEBench (English and Chinese) as ``lopd/ACEBench-v0``.

Layout: :mod:`.data` (files → tasks), :mod:`.official_prompts` / :mod:`.prompts` (prompts as ACEBench
builds them), :mod:`.decode` (reading answers as the harness does), :mod:`.normal`, :mod:`.special`,
:mod:`.agent_score` (pure scorers), :mod:`.scenarios` and :mod:`.executor` (the agent world),
:mod:`.users` (simulated users), :mod:`.episodes` and :mod:`.env`.

Scoring ``official`` (default) reproduces the verdicts of ACEBench's ``eval_main.py`` at commit
e6db74b, quirks included; each module's docstring lists the quirks it keeps. ``strict`` deviates only
where the official scorer is plainly wrong:

1. normal, decoding: whitespace inside the answer is kept (official deletes all of it, so string values
   lose their spaces), and answers the official ``[f(a=1)]`` syntax cannot read are read in any tool-call
   syntax lopd parses (JSON, ``<tool_call>``);
2. normal, values: numbers are compared numerically and booleans exactly (official never compares them);
   strings must equal the gold after ACEBench's own standardisation (official: gold is a substring);
   nested dict values are compared the same way (official: ``str(gold) in str(answer)``, so 5 matches 50
   and lists of strings with spaces never match); lists stay ordered, dicts need the same keys; a
   "variable" parameter (gold type ≠ declared type) is compared by value too (official skips it);
3. normal, empty gold lists and dicts match empty answers (official rejects even the gold answer);
4. normal, a gold name keeps its ``_<n>`` suffix when a function of that name exists
   (``personalized_learning_2``; official strips it and so rejects the gold answer), and the function
   description is looked up by exact name (official: first name that is a substring);
5. special: gold values are stripped of surrounding spaces before the substring test
   (``"propertyDetails "``);
6. agent: gold class names are matched case-insensitively and up to one typo (``ReminderAPI``,
   ``Reminderpi``, ``BaseAPI``; official silently skips them), a gold class without a saved counterpart
   fails, and every attribute must be equal (official only checks the gold's keys of dict attributes, so
   an extra message or reminder passes).

Where the official checker would crash (a description without ``parameters``), both modes fail the
answer with ``error_type="checker_crash"``. Observations are chat messages; the first agent prompt is
byte-exact and :meth:`ACEBenchEnv.official_prompt` renders the official text later on.
"""

from lopd_envs.suites.acebench.env import ACEBenchEnv
from lopd_envs.suites.acebench.users import InstructionUser, LLMUser, ScriptedUser, UserSimulator

__all__ = ["ACEBenchEnv", "InstructionUser", "LLMUser", "ScriptedUser", "UserSimulator"]
