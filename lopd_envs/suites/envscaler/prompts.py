"""The texts EnvScaler's runner shows: the agent's system prompts (``interact_with_env/agent/
system_prompt_util.py``), the environment introduction (``envscaler_env/base_env.py``), the tools merged
into the system prompt in its "prompt" inference mode (Qwen3's layout), and the simulated user's prompt
(``envscaler_env/utils/user_agent.py``). Kept verbatim: models trained on EnvScaler saw exactly these."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

AGENT_OPENER = "[Agent] Hi! How can I help you today?"
AGENT_PREFIX = "[Agent] "
STOP = "###STOP###"

NON_CONVERSATIONAL_SYSTEM = """You are a helpful assistant. When given a specific task, your goal is to complete it in an interactive environment by making step-by-step use of available tools. 
- Before completing the task, at each step, select a tool from the tool list and fill in all required parameters, making sure that the values are valid. Avoid making parallel tool calls in one step.
- When you believe the task has been completed, respond only with 'Task Completed' to end the trajectory, without adding any other content or making any tool calls.
- It is recommended to first call query tools to gather sufficient information, then use modification tools to complete the task. Adjust actions promptly based on the feedback from the environment, i.e., the tool results.
"""

CONVERSATIONAL_SYSTEM = """You are a helpful assistant. Your goal is to fulfill the user's requests in an interactive environment by step-by-step use of available tools, while proactively communicating with the user when necessary, until the user ends the conversation.
At each step, you will receive either the user's task/reply or the environment's tool call result.
- If you lack essential information to complete the task or perform a tool call, and it cannot be obtained through the existing tool set, actively ask the user for specific details.  
- If you can proceed with the current information, select one tool from the tool set and provide complete, valid parameters. Avoid making parallel tool calls or calling a tool while interacting with the user in one step.
- It is recommended to first call query tools to gather sufficient information, then use modification tools to complete the task. Adjust actions promptly based on the feedback from the environment, i.e., the tool results.
- When you believe the task is completed, clearly inform the user of the result and ask whether there are any new tasks or follow-up requests. 
"""

USER_SYSTEM = """You are a real human user interacting with an Agent assistant.  
Your current task is to have the Agent accomplish the following goal:  

[Task Goal]  
{task}  

**Core Principles:**  
- Do not directly or fully repeat the exact task instruction in your dialogue; instead, progress toward the goal gradually through multiple exchanges.  
- Deliver the task information in parts during the conversation so the Agent can slowly understand and move closer to the final objective.  
- When the task goal has been achieved, output a standalone message: `###STOP###` in your reply to end the dialogue. Do not include anything else.  

**Rules:**  
1. If the task contains multiple sub-tasks, do not reveal all of them at once; provide relevant sub-tasks one by one as the Agent asks.  
2. If completing the task requires multiple pieces of information, do not disclose them all at once; provide partial information in response to the Agent's questions.  
3. All requests must remain strictly within the scope of the task—do not add extra requirements, intentions, or invent information that was not part of the original task.  
4. Always keep the conversation focused on progressing toward the task, ensuring every sub-task or goal is covered and none are skipped.  

**Fidelity and Consistency Requirements:**  
- Always remain faithful to the original task wording throughout the conversation. Pay special attention to preserving exact **keywords, names, and proper nouns**—do not rephrase or alter them.  
- If the Agent assistant presents you with multiple options, only choose those that match the intent and constraints of the original task. If none fit, politely refuse and restate your requirement.  
- Do **not** introduce any new information that is not present in the original task description.  
- Do not repeat information you have already provided earlier in the conversation unless the Agent explicitly asks for clarification.  

**Style Requirements:**  
- Keep the dialogue natural and conversational, avoiding overly rigid or formal expressions.  

**Output Format (must be strictly followed):**  
# Thought:  
<Your thought process (this will NOT be sent to the Agent)> 
# Reply:  
<Your natural, conversational reply as the user, to be sent to the Agent>"""


def environment_introduction(introduction: str, rules: Sequence[str]) -> str:
    """``construct_env_introduction``: the brief introduction, then the rules as a bullet list."""
    rule_lines = "".join(f"- {rule}\n" for rule in rules)
    return (f"# Environment Information\n\n## Brief Introduction:  \n{introduction}\n\n"
            f"## Environment Rules / Constraints:  \n{rule_lines}")


def merge_tools(system: str, tools: Sequence[dict[str, Any]]) -> str:
    """The runner's prompt mode: tools listed in ``<tools>`` and the ``<tool_call>`` format (Qwen3 layout)."""
    if not tools:
        return system
    listing = "".join("\n" + json.dumps(tool, ensure_ascii=False) for tool in tools)
    return (f"{system}\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
            f"You are provided with function signatures within <tools></tools> XML tags:\n<tools>{listing}\n</tools>\n\n"
            "For each function call, return a json object with function name and arguments within "
            "<tool_call></tool_call> XML tags:\n<tool_call>\n"
            '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')


def agent_system(conversational: bool, introduction: str, tools: Sequence[dict[str, Any]]) -> str:
    base = CONVERSATIONAL_SYSTEM if conversational else NON_CONVERSATIONAL_SYSTEM
    base = f"{base}\n\nThe following is an introduction to the current environment:\n{introduction}"
    return merge_tools(base, tools)
