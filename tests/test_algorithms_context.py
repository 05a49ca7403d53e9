"""What each text-context baseline's teacher sees, token for token: OPSD the reference answer, SDPO another
success of the same task (never the rollout's own) or the environment's feedback, SDFT a demonstration from
the bank, Skill-SD the skills the model summarised; all inside the task's user turn through the chat template.

The teacher's input is captured where the update hands it to the scorer, and compared with the prompt
rendered from scratch by the chat template with the expected text in the task's user message (the tiny
model's byte-level tokenizer makes the ids of that rendering unique)."""

from __future__ import annotations

import copy
import functools
import json

import pytest
import torch

from lopd_train import models
from lopd_train.algorithms import ALGORITHMS, opsd, sdft, sdpo, skill_sd
from lopd_train.experience.bank import trace_key
from lopd_train.latent.context import trace_text


@functools.lru_cache(maxsize=1)
def coin_rollouts():
    """Six coin-flip rollouts of two tasks (``heads_0`` x3, ``tails_1`` x3) by the tiny random student, and
    the env they came from; sampled once per process (tests copy them)."""
    import tests.coin_env  # noqa: F401
    from lopd_train.rollout.engine import SamplingConfig, make_envs, run_episodes

    torch.manual_seed(0)
    base, tok = models.tiny_model()
    tok.padding_side = "left"
    policy = models.wrap_lora(base, {"student": models.lora_config(4, 8)})
    envs = make_envs("lopd-test/Coin-v0", 6, category="all")
    trajs = run_episodes(policy, tok, envs, ["heads_0"] * 3 + ["tails_1"] * 3, SamplingConfig(max_new_tokens=6),
                         groups=[0, 0, 0, 1, 1, 1])
    return trajs, envs[0]


@functools.lru_cache(maxsize=1)
def embedder():
    from lopd_train.experience.retriever import Embedder

    return Embedder()


def texts(contexts):
    """The teachers' texts of :meth:`contexts` (``None`` where a rollout is not supervised)."""
    return [c.text if c is not None else None for c in contexts]


def algo_setup(tmp_path, algo: str, successes=(True, False, False, False, True, False), **kw):
    """A tiny random Llama with a student adapter (LoRA B = 0: the student equals the base model), the six
    coin-flip rollouts of :func:`coin_rollouts` with outcomes set to ``successes``, a bank holding the
    successes and three experiences of other tasks, and the algorithm object (``kw`` override
    ``TrainConfig`` fields)."""
    from lopd_envs.trace import Trace
    from lopd_train.config import TrainConfig
    from lopd_train.experience.bank import ExperienceBank
    from lopd_train.experience.retriever import Retriever

    kw.setdefault("baseline_semantics", "v2")  # these tests pin study v2's variants; the references': their own file
    torch.manual_seed(0)
    base, tok = models.tiny_model()
    tok.padding_side = "left"
    policy = models.wrap_lora(base, {"student": models.lora_config(4, 8)})
    settings = dict(model="tiny-random", top_m=5, top_j=2, lora_r=4, lora_alpha=8, lr=1e-3, algo=algo,
                    skill_tokens=8, experience_tokens=4096,
                    temperature=1.0)  # the rollouts' own sampling (coin_rollouts): ratios start at 1
    cfg = TrainConfig(**{**settings, **kw})
    bank = ExperienceBank(tmp_path / "bank.sqlite")
    trajs, env = coin_rollouts()
    trajs = copy.deepcopy(trajs)
    for t, ok in zip(trajs, successes):
        t.success = t.trace.success = ok
        t.reward = t.trace.reward = float(ok)
    bank.add([t.trace for t in trajs])
    for i in range(3):
        tr = Trace(env_id="x", task_id=f"o{i}", task=f"Write note {i}", reward=1.0, success=True)
        tr.add({"text": f"note {i}"})
        bank.add([tr])
    cls = ALGORITHMS[algo]
    retriever = Retriever(bank, embedder=embedder()) if cls.uses_bank else None
    algo_obj = cls(policy, tok, cfg, bank if cls.uses_bank else None, retriever)
    algo_obj.attach_env(env)
    return policy, tok, cfg, trajs, algo_obj


def capture_teacher_inputs(algo) -> list[tuple[list[int], list[int]]]:
    """Make the algorithm record every (ids, action mask) its teacher scores."""
    seen: list[tuple[list[int], list[int]]] = []
    real = algo.teacher_logits

    def spy(seqs, masks):
        seen.extend((s.tolist(), m.tolist()) for s, m in zip(seqs, masks))
        return real(seqs, masks)
    algo.teacher_logits = spy
    return seen


def expected_teacher_ids(tok, t, cfg, framing, text) -> list[int]:
    """The rollout as the teacher must see it: the chat template rendered with ``framing[0] + text +
    framing[1]`` at the start of the task's (last opening) user message, then the rollout's own tokens after
    its prompt."""
    messages = [dict(m) for m in t.messages]
    k = max(i for i, m in enumerate(messages) if m["role"] == "user")
    messages[k]["content"] = framing[0] + text + framing[1] + messages[k]["content"]
    prompt = models.encode(tok, models.render_chat(tok, messages, t.tools, text_tools=cfg.text_tools))
    return prompt + t.input_ids[t.prompt_len:]


def teacher_sequences_by_rollout(seen, trajs):
    """For each rollout, the teacher input whose continuation is that rollout's (None if never scored)."""
    out = []
    for t in trajs:
        tail = t.input_ids[t.prompt_len:]
        out.append(next((ids for ids, _ in seen if ids[len(ids) - len(tail):] == tail), None))
    return out


# --------------------------------------------------------------------------------- OPSD

def test_opsd_teacher_reads_the_reference_answer_in_the_first_user_turn(tmp_path):
    _, tok, cfg, trajs, algo = algo_setup(tmp_path, "opsd")
    seen = capture_teacher_inputs(algo)
    metrics = algo.update(trajs)
    got = teacher_sequences_by_rollout(seen, trajs)
    for t, ids in zip(trajs, got):
        if t.task_id == "heads_0":  # CoinEnv's reference for heads tasks
            assert ids == expected_teacher_ids(tok, t, cfg, opsd.FRAMING, "Reference note for heads_0.")
            assert "Reference note for heads_0." in tok.decode(ids)
        else:  # tails tasks have no reference answer: no teacher, no supervision
            assert ids is None
    assert metrics["context_fraction"] == pytest.approx(0.5) and metrics["grad_norm"] > 0


def test_opsd_without_any_reference_answer_does_not_move_the_student(tmp_path):
    _policy, _, _, trajs, algo = algo_setup(tmp_path, "opsd")
    tails = [t for t in trajs if t.task_id == "tails_1"]
    before = [p.detach().clone() for p in algo.student_params]
    metrics = algo.update(tails)
    assert metrics["context_fraction"] == 0.0
    assert all(torch.equal(a, b) for a, b in zip(before, algo.student_params))


# --------------------------------------------------------------------------------- SDPO

def test_sdpo_never_hints_a_rollout_with_its_own_success(tmp_path):
    _, _tok, _cfg, trajs, algo = algo_setup(tmp_path, "sdpo", experience_format="trace")
    heads = trajs[:3]  # rollout 0 succeeded, 1 and 2 failed; the bank holds only rollout 0 for heads_0
    hints = texts(algo.contexts(heads))
    assert hints[0] is None  # its only "other" success would be itself
    own = sdpo.SOLUTION_HEAD + heads[0].trace.render()
    assert hints[1] == hints[2] == own  # the failures learn from rollout 0's success
    # a copy of the rollout's own success (same trace) is not "another" success either
    twin = texts(algo.contexts([heads[0], heads[0]]))
    assert twin == [None, None]


def test_sdpo_uses_another_success_of_the_same_group_for_a_successful_rollout(tmp_path):
    _, _tok, _cfg, trajs, algo = algo_setup(tmp_path, "sdpo", successes=(True, True, False) * 2,
                                          experience_format="trace")
    a, b, c = trajs[:3]
    if trace_key(a.trace) == trace_key(b.trace):
        pytest.skip("the two sampled successes happen to be identical traces")  # seed-dependent; not the case at seed 0
    hints = texts(algo.contexts([a, b, c]))
    assert hints[0] == sdpo.SOLUTION_HEAD + b.trace.render()
    assert hints[1] == sdpo.SOLUTION_HEAD + a.trace.render()
    assert hints[2] == sdpo.SOLUTION_HEAD + a.trace.render()


def test_sdpo_falls_back_to_the_environment_feedback_when_nothing_succeeded(tmp_path):
    _, _tok, _cfg, trajs, algo = algo_setup(tmp_path, "sdpo", successes=(True,) + (False,) * 5)
    tails = trajs[3:]  # none succeeded, and the bank has no success of tails_1
    hints = texts(algo.contexts(tails))
    for t, h in zip(tails, hints):
        fb = sdpo.feedback_text(t.trace)
        assert fb is not None and "noted" in fb  # the coin env's tool result
        assert h == sdpo.FEEDBACK_HEAD + fb
    heads = trajs[:3]  # where a rollout of the task succeeded, a failure gets the success, not feedback
    assert texts(algo.contexts(heads))[1].startswith(sdpo.SOLUTION_HEAD)


def test_sdpo_teacher_sees_the_hint_inside_the_first_user_turn(tmp_path):
    _, tok, cfg, trajs, algo = algo_setup(tmp_path, "sdpo", experience_format="trace")
    seen = capture_teacher_inputs(algo)
    algo.update(trajs)
    got = teacher_sequences_by_rollout(seen, trajs)
    hints = texts(algo.contexts(trajs[:3])) + texts(algo.contexts(trajs[3:]))
    for t, ids, hint in zip(trajs, got, hints):
        if hint is None:
            assert ids is None
        else:
            assert ids == expected_teacher_ids(tok, t, cfg, sdpo.FRAMING, hint)
    prompt_text = tok.decode(got[1])
    user = prompt_text.index("<|im_start|>user\n")
    assert prompt_text.index(sdpo.SOLUTION_HEAD) > user  # in the user turn, not before the template's text


def test_feedback_text_prefers_error_results():
    from lopd_envs.trace import Trace

    tr = Trace(env_id="e", task_id="t", task="do it", reward=0.0, success=False)
    tr.add({"name": "f", "arguments": {"a": 1}}, "ok")
    tr.add({"name": "g", "arguments": {}}, "unknown tool g", error=True)
    tr.add({"text": "done"}, "[evaluation] 2 of 5 tests failed")
    assert sdpo.feedback_text(tr) == 'call g({}) -> ERROR unknown tool g\nOutcome: failure (reward 0.00)'
    tr.steps[1].error = False
    assert sdpo.feedback_text(tr).startswith("say done -> [evaluation] 2 of 5 tests failed")
    assert sdpo.feedback_text(Trace(env_id="e", task_id="t", task="x")) is None


# --------------------------------------------------------------------------------- SDFT

def test_sdft_teacher_sees_the_nearest_demonstration_never_the_groups_own(tmp_path):
    _, tok, cfg, trajs, algo = algo_setup(tmp_path, "sdft")
    own_ids = {algo.bank.get_by_key(trace_key(t.trace)).id for t in trajs if t.success}
    seen = capture_teacher_inputs(algo)
    algo.update(trajs)
    got = teacher_sequences_by_rollout(seen, trajs)
    for members, ids_of in ((trajs[:3], got[:3]), (trajs[3:], got[3:])):
        demo = algo.demonstration(members)
        assert demo is not None and demo.id not in {algo.bank.get_by_key(trace_key(t.trace)).id
                                                     for t in members if t.success}
        from lopd_train.latent.context import experience_text

        text = experience_text(demo, cfg.experience.experience_format)
        for t, ids in zip(members, ids_of):
            assert ids == expected_teacher_ids(tok, t, cfg, sdft.FRAMING, text)
    assert own_ids  # the setup really had own successes to exclude


# --------------------------------------------------------------------------------- Skill-SD

def test_skill_summaries_are_the_models_greedy_decode_of_the_summary_prompt(tmp_path, monkeypatch):
    """The model is asked once per unsummarised experience, greedily, with the summary prompt; its decoded
    answer is the skill. (A random model's greedy answer is often empty, so the spy replaces the first
    answer by known tokens and keeps the others as the model gave them.)"""
    policy, tok, cfg, trajs, algo = algo_setup(tmp_path, "skill_sd")
    experiences = algo.bank.all()
    prompt = algo.summary_prompt(experiences[0])
    assert tok.decode(prompt) == ("<|im_start|>user\n" + skill_sd.SUMMARY_PROMPT.format(
        trajectory=experiences[0].text) + "<|im_end|>\n<|im_start|>assistant\n")
    calls = []
    real = skill_sd.generate

    def spy(model, tokenizer, prompts, sampling):
        calls.append((prompts, sampling, model.active_adapter))
        outs = real(model, tokenizer, prompts, sampling)
        known = [*models.encode(tokenizer, " Call note with a short text."), tokenizer.eos_token_id]
        return [(known, [0.0] * len(known), True, None), *outs[1:]]
    monkeypatch.setattr(skill_sd, "generate", spy)
    metrics = algo.prepare(trajs)
    (prompts, sampling, active), = calls
    assert prompts == [algo.summary_prompt(e) for e in experiences]
    assert sampling.greedy and sampling.max_new_tokens == cfg.baselines.skill_tokens and active == "student"
    real_outs = real(policy, tok, prompts[1:], sampling)
    want = {experiences[0].key: "Call note with a short text."}
    want.update({e.key: tok.decode(o[0], skip_special_tokens=True).strip()
                 for e, o in zip(experiences[1:], real_outs)})
    skills = {json.loads(s.trace)["source"]: s.text for s in algo.skills.all()}
    assert skills == {k: v for k, v in want.items() if v}  # an empty summary is no skill...
    assert metrics["skills_added"] == len(skills)
    assert algo.attempted == {e.key for e in experiences}  # ... but counts as attempted
    calls.clear()
    again = algo.prepare(trajs)  # nothing new to summarise: the model is not asked again
    assert again["skills_added"] == 0 and not calls


def test_skill_sd_teacher_sees_retrieved_skills_not_those_of_its_own_rollouts(tmp_path):
    from lopd_train.experience.bank import ExperienceBank

    _, tok, cfg, trajs, algo = algo_setup(tmp_path, "skill_sd", top_j=10)
    # stand-in summaries (a tiny random model's are noise): one skill per experience, naming its source
    algo.summarise = lambda exps: [f"skill of {e.task_id} #{e.id}" for e in exps]
    seen = capture_teacher_inputs(algo)
    algo.update(trajs)
    got = teacher_sequences_by_rollout(seen, trajs)
    own_heads = {f"skill of heads_0 #{algo.bank.get_by_key(trace_key(trajs[0].trace)).id}"}
    for _traj, ids in zip(trajs[:3], got[:3]):
        text = tok.decode(ids)
        assert "skill of o0" in text and not any(s in text for s in own_heads)
    (hits,) = algo.skill_retriever.retrieve([trajs[0].task], k=10, exclude=[[]])
    kept = [s for s in hits if s.text not in own_heads]
    assert got[0] == expected_teacher_ids(tok, trajs[0], cfg, skill_sd.FRAMING,
                                          "\n".join(f"- {s.text}" for s in kept))
    # the skill bank is durable and comes back from a checkpoint's state
    state = algo.state_dict()
    assert len(ExperienceBank(tmp_path / "skills.sqlite")) == len(state["skills"]) == len(algo.bank)
    other = ExperienceBank(tmp_path / "resumed" / "bank.sqlite")  # a run folder without skills.sqlite
    other.merge_from(algo.bank.path)
    fresh = type(algo)(algo.policy, tok, cfg, other, algo.retriever)
    assert len(fresh.skills) == 0
    fresh.load_state_dict(state)
    assert sorted(s.text for s in fresh.skills.all()) == sorted(r[3] for r in state["skills"])
    assert fresh.attempted == algo.attempted


def test_trace_text_matches_the_banked_rendering(tmp_path):
    _, _, _cfg, trajs, algo = algo_setup(tmp_path, "sdpo")
    from lopd_train.latent.context import experience_text
    from lopd_train.rollout.replay import attach_transcript

    t = trajs[0]
    attach_transcript(t.trace, "FULL TRANSCRIPT")
    assert trace_text(t.trace, "chat") == "FULL TRANSCRIPT" and trace_text(t.trace, "trace") == t.trace.render()
    exp = algo.bank.get_by_key(trace_key(t.trace))
    assert experience_text(exp, "trace") == trace_text(t.trace, "trace")
