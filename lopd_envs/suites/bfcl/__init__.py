"""BFCL-v3 (Berkeley Function Calling Leaderboard, ``bfcl-eval==2025.8.6.2``) as ``lopd/BFCLv3-v0``.

Modules, one job each: :mod:`.data` (files and categories), :mod:`.prompts` (what the model is shown),
:mod:`.decode` (reading answers as the harness does), :mod:`.convert` (Java/JavaScript values),
:mod:`.ast_checker` (single-turn rules), :mod:`.single_turn` (single-turn verdicts), :mod:`.api` (the
simulated APIs and running calls on them), :mod:`.multi_turn` (the multi-turn checker), :mod:`.env`.

Answers are read as the harness reads them: text with its prompting decoder (the ``[f(a=1)]`` syntax the
official system prompt asks for), and calls given as data (a message's ``tool_calls``, ``<tool_call>`` blocks
or JSON text) as its function-calling (FC) handlers read them. Tools are offered and accepted under the
dataset's names and under sanitised names (dots to underscores), mapped back before scoring.

Scoring modes. ``official`` (default) gives the official checker's verdict, quirks included. ``strict``
departs from it where the official behaviour is plainly wrong; each deviation:

1. Multi-turn turns whose ground truth is empty (miss_func / miss_param: the model should ask, not act)
   must contain no function call. The official checker has this check (``multi_turn_irrelevance_checker``)
   but it is switched off in the released harness.
2. A multi-turn episode force-terminated (more than 20 steps in a turn) fails even when that happened on
   the last turn; officially only an earlier force-termination fails.
3. Unary operators in Python-syntax answers mean what they mean in Python: officially any unary operator on
   a constant negates it (``+5`` reads as ``-5``, ``not True`` as ``-1``).
4. Multi-turn call strings bind only call names to API methods; officially a regular expression also
   rewrites call-like text inside string arguments (``"see ls(a)"``), with instance names that differ
   between the model's and the ground truth's run.

Differences from the harness in both modes (none changes a verdict on well-formed answers): expressions
are never ``eval``-ed (literal arithmetic only; calls in multi-turn strings reach API methods only, never
Python builtins); a few API calls that would run for hours are refused (huge integer powers, precision above
10,000 digits); Java/JavaScript text is read by a small scanner instead of tree-sitter (same values for
well-formed calls); an answer that would crash the official checker scores 0 with
``error_type="ast_checker:error"``.
"""

from lopd_envs.suites.bfcl.data import CATEGORIES, GROUPS, MULTI_TURN, SINGLE_TURN
from lopd_envs.suites.bfcl.env import BFCLv3Env

__all__ = ["CATEGORIES", "GROUPS", "MULTI_TURN", "SINGLE_TURN", "BFCLv3Env"]
