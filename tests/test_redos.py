"""Parsers of model- and worker-written text take linear time on adversarial input (issue 24, item 2).

Each shape is a prefix, one unit repeated to ~150,000 characters, and a suffix: the forms that make a
backtracking regex super-linear (a lazy group before ``\\s*``, an opening tag retried from every later one,
a greedy run that must give back a whole line). Every parser of text that a model, a simulated user or a
sandboxed worker writes is swept with all of them; a linear parser takes milliseconds here, the quadratic
ones this replaced took 5 s to minutes.

A wall-clock bound alone failed on a loaded CI machine (a linear parser at 0.2 s took 2 s there), so the
check is the growth: the text is timed at ~37,500 and at ~150,000 characters, interleaved, best of three
(more while the ratio fails: see ``_linear``).
Four times the length takes about four times as long when linear and sixteen times when quadratic; the test
fails above eight. Load slows both sizes alike on average, so the ratio stands where the bound did not. Times too
small to measure (the long text under ``FLOOR``) pass: a quadratic parser is seconds there."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from lopd_envs import tools
from lopd_envs.codeexec import extract
from lopd_envs.suites.acebench import decode as acebench_decode
from lopd_envs.suites.acebench.episodes import call_like
from lopd_envs.suites.bfcl import convert as bfcl_convert
from lopd_envs.suites.bfcl import decode as bfcl_decode
from lopd_envs.suites.envscaler import actions, users
from lopd_envs.suites.livecodebench.judge import official_extract

LENGTH = 150_000
#: Below this time for the long text a parser is linear whatever its ratio (timer noise dominates).
FLOOR = 0.25
#: Four times the text may take at most this many times as long (linear 4, quadratic 16).
GROWTH = 8.0
#: Rounds of timing at most, and the seconds after which no round beyond the third starts (see ``_linear``).
MAX_ROUNDS = 9
PATIENCE = 30.0

PREFIXES = ["", "x", "<tool_call>", "```", "```python\n", "[", "[f(a=", "f(", "f(a<", "<think>", "@think@", "# Thought:",
            '{"name": "f", "arguments": ']
UNITS = [" ", "\n", "[", "(", "{", '"', "\\\"", "`", "```", "<tool_call>", "<tool_call>{", "</tool_call>", "<think>",
         "@think@", "# Thought:", "# Reply:", "a", "a=", "a.", "x=1,", "<A,", "[{", "[f(", "new (", "def f(", "[[],",
         "new a[]{", "new HashMap<", "new ArrayList<>() {{", "add(", 'put("', "a:,"]
SUFFIXES = ["", "x"]

PARSERS: dict[str, Callable[[str], object]] = {
    "tools.parse_action": tools.parse_action,
    "envscaler.read_action": lambda text: actions.read_action(tools.parse_action(text), False),
    "envscaler.visible_text": actions.visible_text,
    "envscaler.parse_reply": users.parse_reply,
    "acebench.call_like": call_like,
    "acebench.decode_answer": acebench_decode.decode_answer,
    "acebench.decode_agent_message": acebench_decode.decode_agent_message,
    "bfcl.decode_python": lambda text: bfcl_decode.decode_text(text, "Python"),
    "bfcl.decode_java": lambda text: bfcl_decode.decode_text(text, "Java"),
    "bfcl.decode_javascript": lambda text: bfcl_decode.decode_text(text, "JavaScript"),
    "bfcl.java_array": lambda text: bfcl_convert.java_value(text, "Array", "String"),
    "bfcl.java_arraylist": lambda text: bfcl_convert.java_value(text, "ArrayList", "String"),
    "bfcl.java_hashmap": lambda text: bfcl_convert.java_value(text, "HashMap"),
    "bfcl.js_array": lambda text: bfcl_convert.js_value(text, "array"),
    "bfcl.js_dict": lambda text: bfcl_convert.js_value(text, "dict"),
    "codeexec.fenced_blocks": extract.fenced_blocks,
    "livecodebench.official_extract": official_extract,
}

#: The shapes that were quadratic before issue 24, by parser (each took from 5 s to minutes).
KNOWN = [
    ("tools.parse_action", "<tool_call>x", " ", "x"),
    ("tools.parse_action", "```", " ", "x" * 75_000),
    ("envscaler.visible_text", "", "<think>", ""),
    ("envscaler.read_action", "", "<tool_call>{", ""),  # the official parser's first-block search
    ("envscaler.parse_reply", "", "# Thought:", ""),
    ("envscaler.parse_reply", "# Thought:", " ", "x"),
    ("acebench.call_like", "", "[", ""),
    ("codeexec.fenced_blocks", "", "```", ""),
    ("bfcl.decode_java", "f(a=", "<", ")"),  # a lookahead rescanning from every "<"
    ("bfcl.java_array", "", "new a[]{", ""),
    ("bfcl.java_arraylist", "", "new ArrayList<>(Arrays.asList(", ""),
    ("bfcl.java_hashmap", "", "new HashMap<", ""),
]


@pytest.mark.parametrize("unit", ["[[],", "[[], ", "[[1]],"])
def test_a_javascript_2d_array_cannot_be_split_exponentially(unit):
    """The official two-dimensional array regex tried every split of the rows: 72 characters of ``[[],``
    took 0.1 s and every 8 more multiplied that by five."""
    linear, short, long = _linear(PARSERS["bfcl.js_array"], _shape("", unit, ""))
    assert linear, (short, long)


def test_a_java_type_argument_cannot_be_split_exponentially():
    """``<`` and 30 letters: the old type-argument regex tried every split of the letters (minutes); 26 and
    30 letters must take about the same time (exponential is sixteen times)."""
    linear, short, long = _linear(PARSERS["bfcl.decode_java"], lambda length: "f(a<" + "A" * (26 + 4 * (length == LENGTH)) + ")")
    assert linear, (short, long)


def _linear(parse: Callable[[str], object], make: Callable[[int], str]) -> tuple[bool, float, float]:
    """(linear?, seconds on the short text, seconds on the long one) for ``make(length)`` texts.

    Three interleaved rounds, then more (up to ``MAX_ROUNDS``, within ``PATIENCE`` seconds) while the ratio
    is above ``GROWTH``: a load spike can land on the long text's every one of three rounds and not on the
    short's (the clean-clone CI saw a linear 4.1x parser read 9.7x beside a training run), and the best of
    more rounds finds the quiet timings. A quadratic parser stays at ~16x however many rounds it gets."""
    short, long = make(LENGTH // 4), make(LENGTH)
    best_short = best_long = float("inf")
    started = time.perf_counter()
    for rounds in range(1, MAX_ROUNDS + 1):
        best_short = min(best_short, _elapsed(parse, short))
        best_long = min(best_long, _elapsed(parse, long))
        if best_long < FLOOR:
            return True, best_short, best_long
        linear = best_long / max(best_short, 1e-3) <= GROWTH
        if rounds >= 3 and (linear or time.perf_counter() - started > PATIENCE):
            break
    return linear, best_short, best_long


def _shape(prefix: str, unit: str, suffix: str) -> Callable[[int], str]:
    return lambda length: prefix + unit * (length // len(unit)) + suffix


def _elapsed(parse: Callable[[str], object], text: str) -> float:
    start = time.perf_counter()
    try:
        parse(text)
    except Exception:  # noqa: BLE001 - a parser may refuse the text; only its time is measured here
        pass
    return time.perf_counter() - start


@pytest.mark.parametrize("name, prefix, unit, suffix", KNOWN)
def test_the_shapes_that_were_quadratic_are_linear(name, prefix, unit, suffix):
    linear, short, long = _linear(PARSERS[name], _shape(prefix, unit, suffix))
    assert linear, (short, long)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PARSERS))
def test_every_parser_is_linear_on_every_shape(name):
    slow = []
    for prefix in PREFIXES:
        for unit in UNITS:
            for suffix in SUFFIXES:
                linear, short, long = _linear(PARSERS[name], _shape(prefix, unit, suffix))
                if not linear:
                    slow.append((prefix, unit, suffix, round(short, 3), round(long, 3)))
    assert not slow, slow


@pytest.mark.parametrize("power, expected", [(1, True), (2, False)])
def test_the_growth_check_tells_a_quadratic_parser_from_a_linear_one(power, expected):
    """The check itself, on parsers whose time is known: they sleep ``c * len(text) ** power`` (sleeping needs
    no core, so the machine's load cannot blur it), 0.4 s on the long text either way: 4x growth passes,
    16x fails even after the extra rounds."""
    def parse(text: str) -> None:
        time.sleep(0.4 * (len(text) / LENGTH) ** power)

    linear, short, long = _linear(parse, _shape("", "a", ""))
    assert linear is expected, (short, long)
