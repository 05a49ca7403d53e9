"""LiveCodeBench code generation (``lopd/LiveCodeBench-v0``), official ``code_generation_lite`` format.

Rows: ``question_title, question_content, platform, question_id, contest_id, contest_date, starter_code,
difficulty, public_test_cases, private_test_cases, metadata`` (tests and metadata are JSON strings; private
tests are either JSON or base64 of zlib of a pickled JSON string). Sources, first found: ``path=`` (a jsonl
file or a folder of ``test*.jsonl``), ``<data dir>/livecodebench/``, the Hugging Face hub
(``livecodebench/code_generation_lite``) when online, else an error saying how to fetch them. The few
problems of our own in ``samples.jsonl`` are read only when asked for by name (``source="bundled"``, or its
older name ``"samples"``), never in place of missing data. ``release_version``
(``release_v1`` … ``release_v6``, or ``v2``, ``v1_v3`` …) selects the hub files and ``start_date`` /
``end_date`` (``YYYY-MM-DD``) filter on ``contest_date``, as LiveCodeBench does.

Categories: ``stdin`` and ``functional`` (LeetCode-style, ``metadata.func_name``). Task ids are the
official ``question_id``. Reward 1 when every public and private test passes.

Scoring ``official`` follows LiveCodeBench's current scorer, ``lcb_runner/evaluation/testing_util.py`` at
LiveCodeBench/LiveCodeBench commit 28fef95ea8c9f7a547c8329f2cd3d32b92c1fa24 (the stdin mock unchanged since
16de2a1), quirks included: the answer's last fenced code block (none: fail); functional problems call
``Solution().<func_name>(*json_lines)`` with its import preamble, and each test appends
``prediction == expected`` (a returned tuple made a list) and then tests it with ``not``, so numpy scalars
pass, a numpy array of two or more items is a runtime error (-4) and a wrong answer's entry is ``False``;
stdin programs run in-process, wrapped into one function, with ``sys.stdin`` its ``MockStdinWithBuffer``
(``.buffer.read()`` the whole input, ``.buffer.readline()`` always the first line, ``readlines()`` equal
to ``input.split("\n")``, ``read()`` the whole input every call, not iterable) and ``readline``/
``readlines``/``read`` patched on the process's original stdin object, so a hoisted ``from sys import
stdin`` and the preamble's ``stdin`` read the test input (``stdin.buffer`` there reads nothing);
outputs are compared line by line after stripping, equal lines or equal ``Decimal`` tokens, and a
comparison that raises (``sNaN``) makes the whole result ``[-4]``; ``exit()`` works and ``quit`` is
``None`` (its guard); a ``SystemExit`` outside an stdin run or a ``KeyboardInterrupt`` kills its worker
(every test -1); numpy is importable (its package folder bound read-only into the sandbox, see
:mod:`.libraries`); 6 s per test, kept by the host's clock. The official tool's verdicts on these
behaviours are the test data in ``tests/lcb_official_verdicts.json``.
Deviations in official mode: numpy is preloaded before the guard only when the program's text names it
(lcb_runner always has it loaded); numpy is offered on the bubblewrap and process backends when the
sandbox's interpreter has the scorer's Python version (Docker: whatever the image holds); a numpy value
comes back as a numpy value of the same dtype (object or structured dtypes and other foreign objects
equal nothing, as for every returned object: comparisons happen in the scorer, on plain data).
``strict`` deviates where real judges do: an answer without a fence is taken as code when it parses;
stdin programs run as real processes with the test input on their real stdin (each test a fresh
sandboxed process), so ``sys.stdin.buffer``, iteration and ``open(0)`` work as on the judges; ``exit()``
and ``quit()`` both work and the preamble's names (``gcd``, ``deque``, ``List``...) work without an
import, as judges that pre-import them accept.

Modules: :mod:`.data` (rows, release files, private-test decoding; the hub source declared to
:mod:`lopd_envs.assets`), :mod:`.judge` (LiveCodeBench's checks, and running the tests), :mod:`.harness`
(the program that runs *inside* the sandbox), :mod:`.env`.
"""

from lopd_envs.suites.livecodebench.env import LiveCodeBenchEnv

__all__ = ["LiveCodeBenchEnv"]
