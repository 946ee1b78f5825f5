#!/usr/bin/python3
"""The float64 reference for quantized checkpoints (issue 44): a safetensors reader that returns
every quantized module's weight DEQUANTIZED exactly in float64 by its format's rule, under the
name `M.weight`, and the float tensors widened as they are; the forward passes and comparisons
are the existing independent references' (qwen3_reference.py, moe_reference.py,
deepseek_reference.py), which read their checkpoint through this reader.

usage: quant_reference.py FAMILY MODEL_DIR LOGITS_DUMP TOKENS [--tolerance T] [--min-margin M]
                          [--float]
  FAMILY: qwen3 (Qwen3ForCausalLM, and LlamaForCausalLM: the same forward without the q/k
  norms), moe (moe_reference.py: Qwen3-MoE, Mixtral), deepseek (deepseek_reference.py:
  DeepSeek-V3, Kimi-K2.5) or mtp (mtp_reference.py: the MTP module's logits, a
  --dump-mtp-logits file, with its --chain-hidden option). The other arguments are the
  reference's. For qwen3 the comparison is
  done here as moe_reference does it: every row's relative L2 error ||specrun - reference|| /
  ||reference|| below the tolerance (default 1e-5) and every row's argmax equal (qwen3_reference's
  own main compares absolute differences and knows Qwen3 only).
  --float: MODEL_DIR is the float checkpoint the quantized one was written from, read as it is
  (a control: quant_reference.sh requires its error on a quantized model's dump to be large,
  which shows that the quantization is in effect at the tolerance).

The rules (docs/quantization-design.md 1.1, 1.2, 3.5), from config.json's quantization_config
(the outer config or the text config):
  compressed-tensors pack-quantized: `M.weight_packed` I32 [rows, ceil(cols / (32 / b))], value
    of column pf*j + i in bits b*i.. of word j minus 2^(b-1); `M.weight_shape` (I32/I64) gives
    [rows, cols] (the padding cut); `M.weight_scale` [rows, ceil(cols / group_size)] (channel:
    [rows, 1]); `M.weight_zero_point` I32 [ceil(rows / pf), groups] packed along rows (or I8
    [rows, groups]); value (q - z) * s[r, c // group_size], exact in float64;
  fp8 (e4m3): `M.weight` F8_E4M3 decoded by (-1)^s 2^(e-7) (1 + m/8), e == 0: 2^-6 m/8 (a NaN
    code 0x7F/0xFF refused), times `M.weight_scale_inv`[r // bn, c // bk] (F32), exact in
    float64.
"""
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qwen3_reference  # noqa: E402


def quant_config(model_dir):
    outer = json.load(open(os.path.join(model_dir, "config.json")))
    qc = outer.get("quantization_config") or (outer.get("text_config") or {}).get(
        "quantization_config")
    if qc is None:
        raise SystemExit(f"{model_dir}/config.json: no quantization_config")
    return qc


def raw_tensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    header.pop("__metadata__", None)
    out = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        raw, dtype, shape = data[begin:end], info["dtype"], info["shape"]
        if dtype == "F32":
            a = np.frombuffer(raw, dtype="<f4").astype(np.float64)
        elif dtype == "BF16":
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view("<f4") \
                .astype(np.float64)
        elif dtype == "F16":
            a = np.frombuffer(raw, dtype="<f2").astype(np.float64)
        elif dtype in ("I32", "I64", "I8", "F8_E4M3"):
            a = np.frombuffer(raw, dtype={"I32": "<i4", "I64": "<i8", "I8": "i1",
                                          "F8_E4M3": "u1"}[dtype])
        else:
            raise SystemExit(f"{path}: {name}: dtype {dtype} not handled by the reference")
        assert a.size == int(np.prod(shape)), f"{path}: {name}: {a.size} values for {shape}"
        out[name] = (dtype, a.reshape(shape))
    return out


def e4m3_decode(codes, name):
    c = np.asarray(codes, dtype=np.int64)
    if np.any((c & 0x7F) == 0x7F):
        raise SystemExit(f"{name}: an e4m3 NaN code (0x7F/0xFF)")
    s, e, m = c >> 7, (c >> 3) & 15, c & 7
    mag = np.where(e == 0, 2.0 ** -6 * (m / 8.0), 2.0 ** (e - 7.0) * (1.0 + m / 8.0))
    return np.where(s == 1, -mag, mag)


def unpack(words, bits, n):
    """int32 [rows, words] -> int64 [rows, n]: the value in bits bits*i.. of word j is element
    pf*j + i, minus the offset 2^(bits-1); the padding beyond n cut."""
    pf, mask, offset = 32 // bits, (1 << bits) - 1, 1 << (bits - 1)
    u = np.ascontiguousarray(words, dtype=np.int32).view(np.uint32).astype(np.int64)
    rows, nw = u.shape
    assert nw == -(-n // pf), f"{nw} words for {n} values"
    out = np.empty((rows, nw * pf), dtype=np.int64)
    for i in range(pf):
        out[:, i::pf] = (u >> (bits * i)) & mask
    return out[:, :n] - offset


def dequantize_int(t, base, weights):
    bits, group, symmetric = weights["num_bits"], weights.get("group_size"), weights["symmetric"]
    rows, cols = (int(v) for v in t[base + ".weight_shape"][1])
    q = unpack(t[base + ".weight_packed"][1], bits, cols)
    assert q.shape == (rows, cols), f"{base}: weight_packed {q.shape} vs weight_shape"
    s = t[base + ".weight_scale"][1]
    if weights["strategy"] == "channel":
        group = cols
    assert weights["strategy"] in ("group", "channel"), weights["strategy"]
    groups = -(-cols // group)
    assert s.shape == (rows, groups), f"{base}: weight_scale {s.shape}, want {(rows, groups)}"
    zname = base + ".weight_zero_point"
    if symmetric:
        assert zname not in t, f"{zname} in a symmetric checkpoint"
        z = np.zeros((rows, groups), dtype=np.int64)
    else:
        zdtype, zp = t[zname]
        if zdtype == "I8":
            z = zp.astype(np.int64)
        else:
            z = np.ascontiguousarray(unpack(np.ascontiguousarray(zp.T), bits, rows).T)
        assert z.shape == (rows, groups), f"{zname}: {z.shape}"
    col_group = np.arange(cols) // group
    return (q - z[:, col_group]).astype(np.float64) * s[:, col_group]


def dequantize_fp8(t, base, block):
    codes = t[base + ".weight"][1]
    rows, cols = codes.shape
    bn, bk = block
    s = t[base + ".weight_scale_inv"][1]
    assert s.shape == (-(-rows // bn), -(-cols // bk)), f"{base}: weight_scale_inv {s.shape}"
    return e4m3_decode(codes, base + ".weight") * s[np.arange(rows) // bn][:, np.arange(cols) // bk]


def read_quantized(path):
    """Every tensor of the file as float64: quantized modules dequantized as `M.weight`."""
    qc = quant_config(os.path.dirname(path))
    t = raw_tensors(path)
    out, used, counts = {}, set(), {}
    if qc["quant_method"] == "compressed-tensors":
        groups = qc["config_groups"]
        assert len(groups) == 1, "one config group"
        weights = next(iter(groups.values()))["weights"]
        for name in t:
            if name.endswith(".weight_packed"):
                base = name[:-len(".weight_packed")]
                assert base + ".weight" not in t, f"{base}: both forms"
                out[base + ".weight"] = dequantize_int(t, base, weights)
                used |= {base + s for s in (".weight_packed", ".weight_scale", ".weight_shape",
                                            ".weight_zero_point")}
                counts["int"] = counts.get("int", 0) + 1
    elif qc["quant_method"] == "fp8":
        for name, (dtype, a) in t.items():
            if dtype == "F8_E4M3":
                base = name[:-len(".weight")]
                out[name] = dequantize_fp8(t, base, qc["weight_block_size"])
                used |= {name, base + ".weight_scale_inv"}
                counts["fp8"] = counts.get("fp8", 0) + 1
    else:
        raise SystemExit(f"quant_method {qc['quant_method']}")
    for name, (dtype, a) in t.items():
        if name in used:
            continue
        assert dtype in ("F32", "BF16", "F16"), f"{path}: {name}: {dtype} left over"
        out[name] = a
    assert counts, f"{path}: no quantized module"
    print(f"quant_reference: {path}: dequantized {counts}", file=sys.stderr)
    return out


def dense(model_dir, argv, reader):
    """Qwen3 and Llama through qwen3_reference.forward, compared by relative L2 per row."""
    tolerance = float(argv[argv.index("--tolerance") + 1]) if "--tolerance" in argv else 1e-5
    cfg = json.load(open(f"{model_dir}/config.json"))
    arch = cfg["architectures"][0]
    assert arch in ("Qwen3ForCausalLM", "LlamaForCausalLM"), arch
    if arch == "LlamaForCausalLM":  # Llama: Qwen3's forward without the q/k norms
        attention = qwen3_reference.attention
        qwen3_reference.attention = lambda c, w, p, x, tables: attention(c, w, p, x, tables,
                                                                           qk_norm=False)
    tokens = [int(v) for v in argv[3].split(",")]
    want = qwen3_reference.forward(cfg, reader(f"{model_dir}/model.safetensors"),
                                   tokens[:-1])
    got = qwen3_reference.read_dump(argv[2]).astype(np.float64)
    assert got.shape == want.shape, f"dump {got.shape} vs reference {want.shape}"
    rel = np.linalg.norm(got - want, axis=1) / np.linalg.norm(want, axis=1)
    worst = int(np.argmax(rel))
    flips = int(np.sum(np.argmax(got, axis=1) != np.argmax(want, axis=1)))
    print(f"{arch} reference: {got.shape[0]} positions x {got.shape[1]} logits, worst relative "
          f"L2 {rel[worst]:.3g} at position {worst} (tolerance {tolerance:g}); argmax differs in "
          f"{flips} rows")
    return 0 if rel.max() < tolerance and flips == 0 else 1


def main():
    if len(sys.argv) < 5 or sys.argv[1] not in ("qwen3", "moe", "deepseek", "mtp"):
        raise SystemExit(__doc__)
    family, argv = sys.argv[1], [a for a in [sys.argv[0]] + sys.argv[2:] if a != "--float"]
    reader = qwen3_reference.read_safetensors if "--float" in sys.argv else read_quantized
    if family == "qwen3":
        return dense(argv[1], argv, reader)
    if family == "moe":
        import moe_reference as module
        module.read_safetensors = reader
    else:
        import deepseek_reference  # mtp_reference reads the model through its read_model
        deepseek_reference.read_safetensors = reader
        if family == "mtp":
            import mtp_reference as module
        else:
            module = deepseek_reference
    sys.argv = argv
    return module.main()


if __name__ == "__main__":
    sys.exit(main())
