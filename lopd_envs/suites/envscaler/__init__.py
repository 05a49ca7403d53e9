r"""EnvScaler (arXiv 2601.05808, ``RUC-NLPIR/EnvScaler``) as ``lopd/EnvScaler-v0``: synthesized stateful
tool environments, their scenarios and rule-based checklists.

Layout: :mod:`.data` (the official files → environments and scenarios; hub, data dir, splits), :mod:`.ours`
(lopd's own environments in that format, the offline default), :mod:`.isolation` and :mod:`.worker_program`
(each episode's instance in one sandboxed worker), :mod:`.actions` (what an action means),
:mod:`.prompts`, :mod:`.users` (the simulated user, on ACEBench's pluggable simulators), :mod:`.scoring`
(the reward), :mod:`.episode` and :mod:`.env`.

Isolation: environment classes and check functions are untrusted, LLM-written code. They run only in the
episode's worker, a persistent interpreter under bubblewrap (no network, read-only system, private /tmp,
own PID namespace, unprivileged uid, rlimits; the plain process backend only on the opt-in every suite
shares: ``sandbox="process"``, ``LOPD_SANDBOX=process`` or ``allow_unisolated=True``), driven over a framed RPC (create, call, snapshot, check) whose every call has a
host-enforced deadline (the worker is killed on expiry) and whose replies have a size and depth budget.
Each check runs in its own forked child of the worker, with its own deadline, so a check can neither hang
nor alter the others; the reward is computed on the host from verdicts that must be exactly ``true``.
The worker is killed and reaped when the episode is scored, at the next ``reset`` and on ``close``.
(Within its own sandbox the environment class is the benchmark: code that rewrites its own worker can
change what its own checks see, as it could by writing its own state; it cannot reach the host.)

Scoring ``official`` (default) follows EnvScaler's runner at commit 87e6673 (``interact_with_env/
envscaler_env``) and the LOPD authors' runtime on it (``bingreeky/LOPD`` @ 50c3d7f, ``envs/envscaler/
runtime.py``): reward ``round(passed / len(checklist), 4)``; a check that raises, lacks
``check_func`` or returns a non-bool (even a truthy one: ``run_check_function`` tests
``isinstance(result, bool)``) counts as failed and stays in the denominator; a tool that raises ends the
episode with reward 0.0 (upstream never reaches ``calculate_reward``); reaching the step limit (30 steps,
40 in conversation) gives 0.0 (the runner stops without a reward); only ``<tool_call>`` blocks and
structured calls are calls, only the first call of an action runs, and any other text is a message to the
user. The four rules where lopd used to differ (issue 55): (a) a ``<tool_call>`` block with both tags that
the official pattern ``<tool_call>\s*(\{.*?\})\s*</tool_call>`` cannot match (no ``}`` before the closing
tag, text after the JSON, a JSON array) is text, so the action is a message to the user, which ends a
non-conversational episode and grades it; (b) a ``chat_with_user`` call with a missing or non-string
``content`` ends the episode and grades it; (c) ``init_config`` is copied once and that one copy goes to
the constructor and to the attributes, so a class that keeps a view of its config sees what its tools
change (both modes); (d) the checks run one after another on one shared final-state object, so a check
that changes it changes what later checks see (in one sandboxed child, each under its own deadline; a
check that hangs or crashes that child fails, and the later checks start again from an untouched copy,
where upstream would hang or stop). Known small differences in both modes: a simulated user's reply
without the ``# Reply:`` section is taken whole (upstream: five retries, then an empty reply); an empty
checklist scores 0.0 (upstream: division by zero); a tool result longer than 100,000 characters is cut;
a tool that hangs past ``call_timeout`` ends the episode (upstream would hang).

``strict`` deviates where the official behaviour is plainly unhelpful for training and evaluation:

1. the reward counts only the checks that were false at reset (``details["reward_over_initially_false"]``;
   when every check held at reset, the official reward); ``details`` always reports both;
2. a tool that raises is shown to the agent as the tool's result and the episode goes on; a truncated
   episode is graded;
3. only the environment's declared tools can be called (upstream: any attribute, ``hasattr``), every
   tool-call syntax lopd parses is accepted (a ``<tool_call>`` without ``"arguments"`` or its closing tag
   too), and all calls of an action run in order;
4. a ``<tool_call>`` block lopd cannot read is a parse error and a ``chat_with_user`` call without a string
   ``content`` an invalid action; the episode goes on, so a formatting slip is not taken for the final
   answer (official rules a and b);
5. each check sees its own copy of the final state, in its own sandboxed child: no check can change
   another's verdict, and the reward does not depend on the order of the checklist (official rule d).

Splits: ``rl``, ``eval`` (the first 200 RL scenarios in file order, or a source's ``splits.json``),
``train`` (the rest) and ``sft`` (ungraded: EnvScaler's SFT scenarios have no check functions).
"""

from lopd_envs.suites.envscaler.env import CATEGORIES, MAX_STEPS, EnvScalerEnv
from lopd_envs.suites.envscaler.users import default_user, official_user

__all__ = ["CATEGORIES", "MAX_STEPS", "EnvScalerEnv", "default_user", "official_user"]
