"""The env contract (tests/conformance.py) for every ACEBench category group, in both languages."""

from __future__ import annotations

from tests.conformance import Conformance


class _ACEBench(Conformance):
    env_id = "lopd/ACEBench-v0"

    def structured_action(self, info):
        return {"role": "assistant", "content": "",
                "tool_calls": [{"name": self.first_tool(info), "arguments": {}}]}


class TestNormalEnglish(_ACEBench):
    kwargs = {"category": "normal", "language": "en"}


class TestNormalChinese(_ACEBench):
    kwargs = {"category": "normal", "language": "zh"}


class TestSpecialEnglish(_ACEBench):
    kwargs = {"category": "special", "language": "en"}

    def text_action(self, info):
        return '["Due to the limitations of the function, I cannot solve this problem."]'


class TestSpecialChinese(_ACEBench):
    kwargs = {"category": "special", "language": "zh"}


class TestAgentEnglish(_ACEBench):
    kwargs = {"category": "agent", "language": "en"}

    def structured_action(self, info):
        return {"role": "assistant", "content": "", "tool_calls": [{"name": "turn_on_wifi", "arguments": {}}]}


class TestAgentChinese(_ACEBench):
    kwargs = {"category": "agent", "language": "zh", "user": ["好的", "是的"]}

    def structured_action(self, info):
        return {"role": "assistant", "content": "", "tool_calls": [{"name": "turn_on_wifi", "arguments": {}}]}


class TestAgentStrict(_ACEBench):
    kwargs = {"category": "agent_multi_turn", "language": "en", "scoring": "strict"}
