"""What the code suites (HumanEval+/MBPP+, LiveCodeBench) share, one job per module:

* :mod:`.extract`: reading the program out of a model's answer;
* :mod:`.functest`: running a function on test inputs in the sandbox and collecting its records;
* :mod:`.valuecodec`: plain values to JSON and back across the sandbox boundary (also sent into it);
* :mod:`.harness_io` and :mod:`.functest_harness`: programs that run *inside* the sandbox (standard
  library only; never imported by the scorer);
* :mod:`.precompiled`: such a program sent in already compiled by the sandbox's own interpreter;
* :mod:`.env`: :class:`CodeEnv` (the sandbox option and property) and :class:`CodeAnswerEpisode`.

Verdicts stay with each suite: they follow its benchmark's own rules.
"""

from lopd_envs.codeexec.env import CodeAnswerEpisode, CodeEnv
from lopd_envs.codeexec.extract import defines, extract_code, fenced_blocks, syntax_ok
from lopd_envs.codeexec.functest import harness_source, run_function_tests

__all__ = ["CodeAnswerEpisode", "CodeEnv", "defines", "extract_code", "fenced_blocks", "harness_source",
           "run_function_tests", "syntax_ok"]
