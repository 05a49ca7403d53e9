"""HumanEval+ and MBPP+ (``lopd/HumanEvalPlus-v0``, ``lopd/MBPPPlus-v0``): evalplus's differential testing.

Data: the official ``HumanEvalPlus-v0.1.10.jsonl.gz`` and ``MbppPlus-*.jsonl.gz`` through the asset layer,
read with evalplus's own loaders (``stream_jsonl``, ``mbpp_deserialize_inputs``, ``completeness_check``).
The expected outputs come from running each canonical solution once (in the sandbox, timed per input)
and are cached in ``<cache>/evalplus/groundtruth/``. A candidate runs on the ``base`` and then the ``plus``
inputs inside the sandbox, each group on a fresh ``exec`` of its code, with evalplus 0.3.1's rules:
per-input limit ``max(1 s, 4 × canonical time)``, its reliability guard, stop at the first failure, and
its comparison (exact match, MBPP's special oracles, ``atol`` with ``np.allclose(rtol=1e-7)``).

Categories: ``plus`` (base and plus tests, the default; ``"all"`` means this) and ``base`` (base tests only).
The episode is one turn: the answer's code is extracted (see ``lopd_envs.codeexec.extract``) and scored.
Official extraction follows evalplus's pipeline for chat models (``codegen.py``): evalplus's own ``sanitize``
(called: ``answer.py``) of the answer alone (the prompt is prepended only for completion models), i.e. the longest parseable run of lines of the
whole text (fence lines never parse, so several blocks and the prose between compete line by line), pruned
to the imports and the definitions the entry point reaches; a body-only answer (``    return x + y``)
stays a body and fails. Deviation: an answer longer than ``MAX_SCAN_LINES`` (400) lines is only tried whole
(evalplus's scan is cubic in the lines; a hostile answer must not cost minutes), and one that makes evalplus
raise (deep nesting, a lone surrogate) is read by lopd's copy of its rules (``codeexec/extract.py``) instead.

Scoring ``official`` reproduces evalplus 0.3.1's verdicts, quirks included:
  * HumanEval/32 (``find_zero``): evalplus's special oracle ``continue``s without counting the input, so
    no solution, the canonical one included, ever passes.
  * ``atol`` leaks: once an expected output is a float with ``atol == 0``, ``atol`` becomes 1e-6 for every
    later input of the group (so later integers compare with ``np.allclose`` too).
``strict`` deviates in exactly these three points: HumanEval/32 passes when every root satisfies
``|poly(x)| <= atol``; ``atol`` is reset for each input; the answer is read as a human grader would (the
fenced block that defines the entry point, decorated definitions kept, and an answer that does not define
it read as the completion of the prompt's function, so a body-only answer passes).
Both modes, for safety: comparisons happen outside the sandbox on plain values, so a returned object of a
custom class (for example one whose ``__eq__`` always says yes) equals nothing, where evalplus would call
its ``__eq__`` (the standard library's ``Counter``/``OrderedDict``/``defaultdict`` do come back as such);
and the sandbox offers the standard library only (no numpy).
Known gap: an expected output too large to ship out of the sandbox within 4 GiB (in the MBPP+ pre-release
only Mbpp/255, ~1 GB for one plus input) leaves that group without expected outputs: it is judged
``fail`` (evalplus's own run fails it too: candidates run out of memory there), the other group as usual.

Options: ``sandbox=`` (backend name or instance), ``version=`` (MBPP+: ``"auto"``, ``"v0.2.0"`` or a
pre-release tag), ``timeout_per_task=`` (evalplus's ``EVALPLUS_TIMEOUT_PER_TASK``, 60 s per group).
Speed: one sandboxed process runs both groups; outputs stream back and the scorer tells the harness to
stop a group at its first wrong output, as evalplus's ``fast_check`` does.

Modules: :mod:`.data` (the files, declared to :mod:`lopd_envs.assets`, and evalplus's loaders),
:mod:`.groundtruth` (expected outputs from the canonical solutions, cached), :mod:`.judge` (evalplus's
comparison and statuses, pure given the sandbox's records), :mod:`.env`. Candidates run in the shared
function-test harness of :mod:`lopd_envs.codeexec`.
"""

from lopd_envs.suites.evalplus.env import EvalPlusEnv, HumanEvalPlusEnv, MBPPPlusEnv

__all__ = ["EvalPlusEnv", "HumanEvalPlusEnv", "MBPPPlusEnv"]
