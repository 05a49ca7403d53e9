"""lopd-eval's outputs cannot mislead (issue 52 item 6): a stand-in's data named in results.md, a chart that
shows its values, n and what is partial even when every score is 0, and ``report_to`` sending the results to
lopd-train's trackers (read back from TensorBoard's events). The "not run" rows of results.md are tested in
tests/test_eval_leaderboards.py."""

from __future__ import annotations

from lopd_train.evaluation import leaderboards as lb
from lopd_train.evaluation import report, tracking
from tests.fake_openai import FakeServer


def _bfcl_results(successes: int) -> dict:
    records = [{"category": "simple", "success": i < successes, "sample": 0, "task_id": f"simple_{i}"}
               for i in range(4)]
    return {"model": {"spec": "m"}, "backend": {"backend": "openai"}, "sampling": {"temperature": 0.0},
            "samples": 1, "envs": {"lopd/BFCLv3-v0": {"leaderboard": lb.bfcl_v3_from_records(records),
                                                      "n_records": 4}}}


def test_results_md_names_the_mbpp_prerelease_standing_in_for_the_release():
    mbpp = {"leaderboard": lb.evalplus_from_records([]), "n_records": 0,
            "data_origin": "data found: /d/evalplus/MbppPlus-prerelease-767efcc.jsonl.gz "
                           "(stand-in for MbppPlus-v0.2.0.jsonl.gz)",
            "provenance": {"benchmark": "MBPP+", "source": "stand-in", "version": "prerelease-767efcc"}}
    he = {"leaderboard": lb.evalplus_from_records([]), "n_records": 0,
          "provenance": {"benchmark": "HumanEval+", "source": "official", "version": "v0.1.10"}}
    results = {**_bfcl_results(0), "envs": {"lopd/MBPPPlus-v0": mbpp, "lopd/HumanEvalPlus-v0": he}}
    md = report.markdown(results)
    assert ("**Data**: lopd/MBPPPlus-v0 ran on MBPP+ `prerelease-767efcc`, source **stand-in** (stand-in for "
            "MbppPlus-v0.2.0.jsonl.gz), not the official release.") in md
    assert "HumanEval+" not in md  # the official release needs no line


def test_the_chart_labels_each_bar_with_value_and_n_and_shows_partial_and_not_run_even_at_zero():
    fig = report.figure(_bfcl_results(0))  # every score 0: once an empty frame
    ax = fig.axes[0]
    texts = [t.get_text() for t in ax.texts]
    assert "0.000\nn=4" in texts  # simple and non-live: value and n on the bar
    assert texts.count("not run") == 2  # live and multi-turn, where their bars would be
    bars = [p for p in ax.patches if p.get_height() == 0.0]
    assert len(bars) == 3 and sum(bool(p.get_hatch()) for p in bars) == 2  # overall and non-live are partial
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(t.startswith("partial") for t in legend)


def test_report_to_sends_the_rows_with_values_and_an_episode_table(bfcl_data, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from lopd_train.evaluation import EvalConfig, read_records, run_eval

    with FakeServer() as server:
        results = run_eval(EvalConfig(model="m", backend="openai", base_url=server.url, env=["lopd/BFCLv3-v0"],
                                      category="simple", limit=2, max_new_tokens=8, output=str(tmp_path / "o"),
                                      progress=False, report_to="tensorboard"))
    acc = EventAccumulator(str(tmp_path / "o" / "tb"), size_guidance={"tensors": 0, "scalars": 0})
    acc.Reload()
    expected = tracking.scalars(results)
    assert set(acc.Tags()["scalars"]) == set(expected) and "eval/BFCLv3/simple" in expected
    assert not any(k.endswith(("/live", "/multi-turn")) for k in expected)  # not run: not sent as 0
    assert [e.value for e in acc.Scalars("eval/BFCLv3/simple")] == [expected["eval/BFCLv3/simple"]]
    [text] = acc.Tensors("rollouts/text_summary")
    table = text.tensor_proto.string_val[0].decode()
    ids = [r["task_id"] for r in read_records(tmp_path / "o" / "records.jsonl")]
    assert len(ids) == 2 and all(f"| 0 | BFCLv3:{i}#0 |" in table for i in ids), table


def test_report_to_none_writes_no_tracker_files(bfcl_data, tmp_path):
    from lopd_train.evaluation import EvalConfig, run_eval

    with FakeServer() as server:
        run_eval(EvalConfig(model="m", backend="openai", base_url=server.url, env=["lopd/BFCLv3-v0"],
                            category="simple", limit=1, max_new_tokens=8, output=str(tmp_path / "o"), progress=False))
    assert not (tmp_path / "o" / "tb").exists()


def test_lopd_eval_reads_report_to_from_its_config_file(tmp_path):
    from lopd_train.cli import eval_config_from_args

    (tmp_path / "e.toml").write_text('model = "m"\nenv = ["lopd/BFCLv3-v0"]\nreport_to = ["trackio", "wandb"]\n')
    cfg, _ = eval_config_from_args(["--config", str(tmp_path / "e.toml")])
    assert cfg.report_to == ["trackio", "wandb"]
