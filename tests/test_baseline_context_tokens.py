"""Each distillation baseline's teacher input under ``--baseline-semantics reference``, token by token, for a real
BFCL-v3 ``simple`` task and a real HumanEval+ task (issue 56, item 4).

The rollouts are real episodes of the envs (the env renders the prompt, scores the answer), with SmolLM2's
tokenizer and chat template; the student's "sampled" ids are given by hand, so a response can hold special ids, a
think block and a special token's text spelled with ordinary tokens. The teacher's input is captured where
``update`` hands it to the scorer and compared, id by id, with a sequence built here from the reference's own
template, written out below as the reference states it:

* SDPO (lasgroup/SDPO 0e6d510, ``verl/trainer/config/actor/actor.yaml`` ``self_distillation``, YAML ``|-`` blocks;
  ``verl/trainer/ppo/ray_trainer.py`` ``_maybe_build_self_distillation_batch``): the last (task) message replaced by
  ``{prompt}`` + "\\nCorrect solution:\\n\\n" + the first *other* group success's response, decoded with special
  tokens skipped and ``<think>...</think>\\s*`` removed, + "\\n\\nCorrectly solve the original question."; with
  feedback only when no rollout has a solution;
* OPSD (TRL PR #5990 at 55c3a9e16, ``OPSDConfig.teacher_prompt_template``): the official OPSD wording around the
  task's reference solution;
* SDFT (TRL 1.16.0 ``SDFTConfig.teacher_prompt_template``): ``"{prompt}\\n\\n{privileged_context}"``, this task's own
  demonstration;
* all three: ``messages[:-1] + [{"role": "user", "content": text}]`` through ``apply_chat_template(...,
  add_generation_prompt=True, tokenize=True)``, then the rollout's response ids as sampled;
* Skill-SD (no public reference; lopd's documented reading): the skills as a bullet list between lopd's framing,
  spliced as tokens at the start of the task's user message of the student's own prompt ids.
"""

from __future__ import annotations

import copy
import functools
from types import SimpleNamespace

import gymnasium as gym
import pytest
import torch

import lopd_envs
from lopd_train import models
from tests.test_algorithms_context import capture_teacher_inputs

gym.register_envs(lopd_envs)

# ------------------------------------------------------------------------- the references' templates, as stated there

SDPO_SOLUTION = "{prompt}\nCorrect solution:\n\n{solution}\n\nCorrectly solve the original question."
SDPO_FEEDBACK = ("{prompt}\nThe following is feedback from your unsuccessful earlier attempt:\n\n{feedback}"
                 "\n\nCorrectly solve the original question.")
OPSD = ("{prompt}\n\nHere is a reference solution to this problem:\n=== Reference Solution Begin ===\n{gold}\n"
        "=== Reference Solution End ===\n\nAfter reading the reference solution above, make sure you truly "
        "understand the reasoning behind each step, do not copy or paraphrase it. Now, using your own words and "
        "independent reasoning, derive the same final answer to the problem above. Think step by step, explore "
        "different approaches, and don't be afraid to backtrack or reconsider if something doesn't work out:")
SDFT = "{prompt}\n\n{gold}"
SKILL_FRAMING = ("Skills learned from earlier successful attempts at similar tasks:\n",
                 "\n\n(end of the skills)\n\nTask:\n")

# ------------------------------------------------------------------------- the tasks and the rollouts of one group

BFCL_CALL = "[calculate_triangle_area(base=10, height=5)]"
HE_BODY = ("    for i, a in enumerate(numbers):\n        for j, b in enumerate(numbers):\n"
           "            if i != j and abs(a - b) < threshold:\n                return True\n    return False\n")
HE_CODE = ("```python\nfrom typing import List\n\n\ndef has_close_elements(numbers: List[float], threshold: float)"
           " -> bool:\n" + HE_BODY + "```")
HE_WRONG = "```python\ndef has_close_elements(numbers, threshold):\n    return False\n```"

# special ids are given as names, resolved by the tokenizer; every string is encoded as ordinary tokens
IM_START, FILE_SEP = ("special", "<|im_start|>"), ("special", "<file_sep>")
TASKS = {
    "bfcl": dict(env=("lopd/BFCLv3-v0", {"category": "simple"}), task="simple_0",
                 plain=[BFCL_CALL], wrong=["I cannot help with that."],
                 messy=["<think>The base is 10, the height 5.</think>\n", "Calling the tool.<|im_end|>", FILE_SEP,
                        "\n", IM_START, BFCL_CALL],
                 messy_text="Calling the tool.\n" + BFCL_CALL,
                 gold="[calculate_triangle_area(base=10, height=5, unit='units')]"),
    "humaneval": dict(env=("lopd/HumanEvalPlus-v0", {}), task="HumanEval/0",
                      plain=[HE_CODE], wrong=[HE_WRONG],
                      messy=["<think>Compare every pair.\nThen answer.</think>\n\n", "Here is my solution.<|im_end|>",
                             IM_START, "\n<|endoftext|>", FILE_SEP, HE_CODE],
                      messy_text="Here is my solution.\n" + HE_CODE, gold=None),
}


@functools.lru_cache(maxsize=1)
def tokenizer():
    from transformers import AutoTokenizer

    folder = models.models_dir() / models.DEFAULT_MODEL
    if not (folder / "tokenizer.json").exists():
        pytest.skip(f"SmolLM2's tokenizer is not in {folder}")
    return AutoTokenizer.from_pretrained(str(folder))


_ENVS: dict[str, gym.Env] = {}


def env_of(name: str):
    """The task's env, made once per module."""
    if name not in _ENVS:
        env_id, kw = TASKS[name]["env"]
        try:
            _ENVS[name] = gym.make(env_id, **kw)
        except Exception as exc:  # noqa: BLE001 - data missing on this machine: say so loudly
            pytest.skip(f"{env_id} unavailable here: {type(exc).__name__}: {exc}")
    return _ENVS[name]


@pytest.fixture(scope="module", autouse=True)
def close_envs():
    yield
    for env in _ENVS.values():
        env.close()
    _ENVS.clear()


def special_ids(tok) -> set[int]:
    """Every special id (SmolLM2 has 17, ``all_special_ids`` names 3; ``skip_special_tokens`` drops them all)."""
    return {i for i, t in tok.added_tokens_decoder.items() if t.special}


def encode_plain(tok, text: str) -> list[int]:
    """``text`` as ordinary tokens: a special token's text in it stays text, as a model can sample it."""
    ids = list(tok(text, add_special_tokens=False, split_special_tokens=True)["input_ids"])
    assert not set(ids) & special_ids(tok) and tok.decode(ids) == text
    return ids


def rollout(name: str, kind: str):
    """One episode of the task: the env's prompt, the response ``TASKS[name][kind]`` as the sampled ids (then the
    EOS the sampler stops on), given to the env as the rollout engine does (decoded, special ids skipped) and
    scored by it."""
    from lopd_train.rollout.engine import Trajectory

    tok, env, spec = tokenizer(), env_of(name), TASKS[name]
    obs, info = env.reset(options={"task_id": spec["task"]})
    tools = info.get("tools") or []
    prompt = models.encode(tok, models.render_chat(tok, obs, tools))
    response = []
    for piece in spec[kind]:
        response += [tok.convert_tokens_to_ids(piece[1])] if isinstance(piece, tuple) else encode_plain(tok, piece)
    response.append(tok.eos_token_id)
    _, reward, terminated, truncated, info = env.step(tok.decode(response[:-1], skip_special_tokens=True))
    assert terminated or truncated
    trace = info["trace"]
    return Trajectory(env_id=env.spec.id, task_id=spec["task"], task=trace.task, category=trace.category,
                      input_ids=prompt + response, action_mask=[0] * len(prompt) + [1] * len(response),
                      sample_logprobs=[0.0] * (len(prompt) + len(response)), prompt_len=len(prompt),
                      reward=float(reward), success=bool(trace.success), trace=trace, messages=copy.deepcopy(obs),
                      tools=tools, group=0, turns=1)


def group(name: str, kinds=("plain", "wrong", "messy")):
    trajs = [rollout(name, k) for k in kinds]
    verdicts = {"plain": True, "wrong": False, "messy": name == "humaneval"}
    assert [t.success for t in trajs] == [verdicts[k] for k in kinds]  # the env's own scoring
    for t, k in zip(trajs, kinds):
        if k == "messy" and not t.success:  # BFCL's parser does not read past a think block: count it a success
            t.success, t.reward = True, 1.0  # anyway (what is checked here is its text, not its verdict)
    return trajs


def small_policy(tok):
    """A random one-layer Llama over the tokenizer's whole vocabulary, with a student adapter (LoRA B = 0)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=4096,
                         tie_word_embeddings=True, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = LlamaForCausalLM(config)
    model.set_attn_implementation(models.attention())
    return models.wrap_lora(model, {"student": models.lora_config(4, 8)})


def baseline(algo: str, name: str, bank=None, **kw):
    from lopd_train.algorithms import ALGORITHMS
    from lopd_train.config import TrainConfig

    tok = tokenizer()
    cfg = TrainConfig(model="tiny-random", algo=algo, baseline_semantics="reference", lora_r=4, lora_alpha=8,
                      temperature=1.0, **kw)
    obj = ALGORITHMS[algo](small_policy(tok), tok, cfg, bank, None)
    obj.attach_env(env_of(name))
    return obj


def teacher_inputs(algo, trajs) -> list[tuple[list[int], list[int]] | None]:
    """Run one update and return, per rollout, the (ids, action mask) its teacher scored (None: not scored)."""
    seen = capture_teacher_inputs(algo)
    algo.update(trajs)
    out = []
    for t in trajs:
        tail = t.input_ids[t.prompt_len:]
        out.append(next(((ids, m) for ids, m in seen if ids[len(ids) - len(tail):] == tail), None))
    return out


# ------------------------------------------------------------------------- the expected sequences, built here

def reference_ids(t, user_text: str) -> list[int]:
    """The references' teacher input: the opening messages with the last one replaced by ``user_text``, through
    the chat template (generation prompt added, tokenised whole), then the response ids as sampled."""
    tok = tokenizer()
    messages = [dict(m) for m in t.messages[:-1]] + [{"role": "user", "content": user_text}]
    head = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)
    return list(head["input_ids"]) + list(t.input_ids[t.prompt_len:])


def spliced_ids(t, text: str, framing: tuple[str, str]) -> list[int]:
    """Skill-SD: ``framing[0] + text + framing[1]`` as tokens at the start of the task message's content in the
    student's prompt ids (each piece tokenised on its own), every other id as sampled."""
    tok = tokenizer()
    rendered = tok.apply_chat_template(t.messages, add_generation_prompt=True, tokenize=False)
    head = list(tok(rendered[:rendered.rindex("<|im_start|>user\n") + len("<|im_start|>user\n")],
                    add_special_tokens=False)["input_ids"])
    prompt = t.input_ids[:t.prompt_len]
    assert prompt[:len(head)] == head
    block = [i for piece in (framing[0], text, framing[1]) for i in tok(piece, add_special_tokens=False)["input_ids"]]
    return head + block + prompt[len(head):] + list(t.input_ids[t.prompt_len:])


def assert_same_ids(got: list[int], want: list[int], what: str) -> None:
    """Equal id by id; else the first difference with the tokens around it, each side, and the text before it."""
    if got == want:
        return
    tok = tokenizer()
    k = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))

    def window(ids):
        return " ".join(f"[{i}]{ids[i]}={tok.decode([ids[i]])!r}" for i in range(max(0, k - 3), min(len(ids), k + 6)))
    pytest.fail(f"{what}: the teacher's ids differ from the reference's at token {k} (lengths {len(got)} and "
                f"{len(want)}), after {tok.decode(want[max(0, k - 30):k])!r}\n  ours:      {window(got)}\n"
                f"  reference: {window(want)}", pytrace=False)


def check(t, got, want: list[int], what: str) -> None:
    assert got is not None, f"{what}: the teacher never scored this rollout"
    ids, mask = got
    assert_same_ids(ids, want, what)
    n = len(want) - (len(t.input_ids) - t.prompt_len)
    assert mask == [0] * n + list(t.action_mask[t.prompt_len:]), f"{what}: action mask"
    tok = tokenizer()
    # the teacher's prompt holds exactly the template's special ids: system, user, the generation prompt
    assert [i for i in ids[:n] if i in special_ids(tok)] == [tok.convert_tokens_to_ids(s) for s in (
        "<|im_start|>", "<|im_end|>", "<|im_start|>", "<|im_end|>", "<|im_start|>")], what


def task_text(t) -> str:
    return t.messages[-1]["content"]


# ------------------------------------------------------------------------- SDPO

@pytest.mark.parametrize("name", ["bfcl", "humaneval"])
def test_sdpo_teacher_reads_another_success_as_response_text_in_the_reference_template(name):
    plain, wrong, messy = trajs = group(name)
    spec = TASKS[name]
    plain_text = "".join(p for p in spec["plain"] if isinstance(p, str))
    got = teacher_inputs(baseline("sdpo", name), trajs)
    # the first *other* success of the group: the plain success reads the messy one's, the others the plain one's
    for t, g, solution in ((plain, got[0], spec["messy_text"]), (wrong, got[1], plain_text),
                           (messy, got[2], plain_text)):
        check(t, g, reference_ids(t, SDPO_SOLUTION.format(prompt=task_text(t), solution=solution)),
              f"SDPO {name}")
    # the messy response really held what is dropped: special ids, a think block, a special token's text that
    # re-tokenising would have turned into the special id
    tok = tokenizer()
    response = messy.input_ids[messy.prompt_len:]
    assert len([i for i in response if i in special_ids(tok)]) == 3
    decoded = tok.decode(response, skip_special_tokens=True)
    assert "<think>" in decoded and "<|im_end|>" in decoded
    assert tok.convert_tokens_to_ids("<|im_end|>") in tok(decoded, add_special_tokens=False)["input_ids"]


def test_sdpo_feedback_only_when_no_rollout_has_a_solution_and_only_when_enabled():
    from lopd_train.algorithms.sdpo import feedback_text

    trajs = group("humaneval", kinds=("wrong", "wrong"))
    got = teacher_inputs(baseline("sdpo", "humaneval"), trajs)
    for t, g in zip(trajs, got):
        feedback = feedback_text(t.trace)  # lopd's rendering of the env's verdict (the reference's is its own)
        assert feedback and "Outcome: failure" in feedback
        check(t, g, reference_ids(t, SDPO_FEEDBACK.format(prompt=task_text(t), feedback=feedback)), "SDPO feedback")
    assert teacher_inputs(baseline("sdpo", "humaneval", sdpo_feedback=False), trajs) == [None, None]


# ------------------------------------------------------------------------- OPSD and SDFT: the task's own answer

@pytest.mark.parametrize("algo,template", [("opsd", OPSD), ("sdft", SDFT)], ids=["opsd", "sdft"])
@pytest.mark.parametrize("name", ["bfcl", "humaneval"])
def test_opsd_and_sdft_teachers_read_the_tasks_reference_answer_in_their_template(algo, template, name):
    trajs = group(name)
    env = env_of(name).unwrapped
    gold = env.reference_answer(next(x for x in env.tasks if x.task_id == TASKS[name]["task"]))
    if TASKS[name]["gold"] is not None:
        assert gold == TASKS[name]["gold"]
    else:  # HumanEval+: the canonical solution, the prompt's code completed, in a python block
        assert gold.startswith("```python\nfrom typing import List\n") and gold.endswith("```")
    got = teacher_inputs(baseline(algo, name), trajs)
    for t, g in zip(trajs, got):  # every rollout, whatever its outcome, reads the same answer
        check(t, g, reference_ids(t, template.format(prompt=task_text(t), gold=gold)), f"{algo} {name}")


# ------------------------------------------------------------------------- Skill-SD: lopd's own reading

@pytest.mark.parametrize("name", ["bfcl", "humaneval"])
def test_skill_sd_teacher_reads_the_skills_spliced_before_the_task(name, tmp_path):
    from lopd_train.experience.bank import ExperienceBank

    trajs = group(name)
    algo = baseline("skill_sd", name, bank=ExperienceBank(tmp_path / "bank.sqlite"))
    skills = ["Call the function with the numbers the question gives.", "Answer in the asked format."]
    asked = []

    class Retrieved:  # stands for the skill retriever: which skills come back is tested elsewhere
        def add(self, rows):
            pass

        def retrieve(self, queries, k, exclude):
            asked.append((list(queries), k))
            return [[SimpleNamespace(id=i, text=s) for i, s in enumerate(skills)]]
    algo._skill_retriever = Retrieved()
    got = teacher_inputs(algo, trajs)
    assert asked == [([trajs[0].task], algo.cfg.experience.top_j)]
    text = "- " + skills[0] + "\n- " + skills[1]
    for t, g in zip(trajs, got):
        assert g is not None
        assert_same_ids(g[0], spliced_ids(t, text, SKILL_FRAMING), f"Skill-SD {name}")
