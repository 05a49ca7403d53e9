"""LiveCodeBench code generation (``lopd/LiveCodeBench-v0``), official ``code_generation_lite`` format.

Rows: ``question_title, question_content, platform, question_id, contest_id, contest_date, starter_code,
difficulty, public_test_cases, private_test_cases, metadata`` (tests and metadata are JSON strings; private
tests are either JSON or base64 of zlib of a pickled JSON string). Sources, first found: ``path=`` (a jsonl
file or a folder of ``test*.jsonl``), ``<data dir>/livecodebench/``, the Hugging Face hub
(``livecodebench/code_generation_lite``) when online, else the few problems of our own bundled in
``samples.jsonl`` (``source="samples"`` picks them explicitly). ``release_version``
(``release_v1`` … ``release_v6``, or ``v2``, ``v1_v3`` …) selects the hub files and ``start_date`` /
``end_date`` (``YYYY-MM-DD``) filter on ``contest_date``, as LiveCodeBench does.

Categories: ``stdin`` and ``functional`` (LeetCode-style, ``metadata.func_name``). Task ids are the
official ``question_id``. Reward 1 when every public and private test passes.

Scoring ``official`` follows LiveCodeBench's runner: the answer's last fenced code block (none: fail);
functional problems call ``Solution().<func_name>(*json_lines)`` with LiveCodeBench's import preamble and
compare with ``==`` after turning a returned tuple into a list; stdin problems run in-process with
``sys.stdin`` a ``StringIO`` (so ``sys.stdin.buffer`` fails, as there) and outputs are compared line by
line after stripping, equal lines or equal ``Decimal`` tokens; 6 s per test (``signal.alarm``).
``strict`` deviates in two points: an answer without a fence is taken as code when it parses, and stdin
programs run as real processes with the test input on their real stdin (each test a fresh sandboxed
process), so ``sys.stdin.buffer`` and ``open(0)`` work as on the judges.

Modules: :mod:`.data` (rows, release files, private-test decoding; the hub source declared to
:mod:`lopd_envs.assets`), :mod:`.judge` (LiveCodeBench's checks, and running the tests), :mod:`.harness`
(the program that runs *inside* the sandbox), :mod:`.env`.
"""

from lopd_envs.suites.livecodebench.env import LiveCodeBenchEnv

__all__ = ["LiveCodeBenchEnv"]
