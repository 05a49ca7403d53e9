"""The F32 GGUF copy served to llama.cpp holds exactly the de-quantised tensors and every metadata key."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from lopd_train.evaluation.gguf_f32 import dequantised_copy


def _tiny_gguf(path):
    """A GGUF with a Q4_1 and a Q8_0 tensor, an F32 one, and metadata of several types (arrays included)."""
    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(str(path), arch="llama")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_1)
    w.add_uint32("llama.block_count", 2)
    w.add_float32("llama.rope.freq_base", 100000.0)
    w.add_bool("tokenizer.ggml.add_bos_token", False)
    w.add_string("tokenizer.chat_template", "{{ messages }}")
    w.add_token_list(["<a>", "b", "c"])
    w.add_token_types([3, 1, 1])
    originals = {}
    for name, qtype, shape in [("blk.0.attn_q.weight", gguf.GGMLQuantizationType.Q4_1, (4, 64)),
                               ("token_embd.weight", gguf.GGMLQuantizationType.Q8_0, (3, 64)),
                               ("output_norm.weight", gguf.GGMLQuantizationType.F32, (64,))]:
        values = rng.standard_normal(shape).astype(np.float32)
        data = values if qtype == gguf.GGMLQuantizationType.F32 else gguf.quants.quantize(values, qtype)
        w.add_tensor(name, data, raw_dtype=qtype)
        originals[name] = gguf.quants.dequantize(data, qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return originals


def test_copy_is_all_f32_with_the_dequantised_values_and_the_same_metadata(tmp_path):
    src, dst = tmp_path / "m.Q4_1.gguf", tmp_path / "out" / "m.F32.gguf"
    originals = _tiny_gguf(src)
    assert dequantised_copy(src, dst) == dst
    a, b = gguf.GGUFReader(src), gguf.GGUFReader(dst)
    assert [t.name for t in b.tensors] == [t.name for t in a.tensors]
    for t in b.tensors:
        assert t.tensor_type == gguf.GGMLQuantizationType.F32
        assert np.array_equal(np.asarray(t.data).reshape(originals[t.name].shape), originals[t.name]), t.name
    assert not np.array_equal(originals["blk.0.attn_q.weight"], np.zeros((4, 64)))
    assert b.fields["general.file_type"].contents() == gguf.LlamaFileType.ALL_F32
    for key, field in a.fields.items():
        if key.startswith("GGUF.") or key == "general.file_type":
            continue
        assert b.fields[key].types == field.types and b.fields[key].contents() == field.contents(), key
    assert not list(dst.parent.glob(".*")), "the temporary file was left behind"


def test_a_file_that_is_not_a_gguf_is_a_clear_error_and_leaves_nothing(tmp_path):
    bad = tmp_path / "garbage.gguf"
    bad.write_bytes(b"not a gguf at all, just bytes")
    with pytest.raises(ValueError):
        dequantised_copy(bad, tmp_path / "out.gguf")
    assert not (tmp_path / "out.gguf").exists() and not list(tmp_path.glob(".out.gguf-*"))


@pytest.mark.slow
def test_smollm2_f32_copy_loads_into_exactly_the_hf_backends_weights():
    """What llama.cpp serves is what ``hf`` runs: transformers reading the F32 copy gives the cached
    checkpoint's tensors bit for bit (q/k permutation and tied embeddings included)."""
    import torch
    from transformers import AutoModelForCausalLM

    from lopd_train import models
    from lopd_train.evaluation.gguf_f32 import smollm2_f32_gguf

    f32 = smollm2_f32_gguf()
    ours = AutoModelForCausalLM.from_pretrained(models.resolve(models.DEFAULT_MODEL), dtype=torch.float32).state_dict()
    served = AutoModelForCausalLM.from_pretrained(str(f32.parent), gguf_file=f32.name, dtype=torch.float32).state_dict()
    assert set(ours) == set(served)
    different = [k for k in ours if not torch.equal(ours[k], served[k])]
    assert not different, different[:5]
