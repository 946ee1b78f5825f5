#!/usr/bin/python3
"""An independent writer of quantized checkpoints (issue 44), written only from docs/reference.md
("`make-model --quantize`: the quantized checkpoints specrun writes"), not from specrun's code:
it turns a float checkpoint as `specrun make-model` writes it (BF16 or F32) into the layouts the
publishers use, so that tests/e2e/quant_reference.sh can check specrun's packed kernels against
a float64 dequantizing reference (quant_reference.py) on checkpoints specrun did not write.

usage: quant_writer.py FLOAT_MODEL_DIR OUT_DIR --quantize int4-g32|int4-g128-asym|fp8-block
                       [--quant-roles experts|linear|all]
       quant_writer.py --self-test
Reads FLOAT_MODEL_DIR/{config.json, generation_config.json, model.safetensors} and writes the same
three files into OUT_DIR: config.json with `quantization_config` (Kimi-K2.5: in the outer config;
the others at the top level), generation_config.json copied, model.safetensors with each chosen
module's `weight` replaced by the quantized tensors; every other tensor byte for byte as it was.

Which modules (names as the text model names them, Kimi-K2.5's `language_model.` dropped):
  experts (default when the model has routed experts): `...mlp.experts.E.{gate,up,down}_proj`,
    `...block_sparse_moe.experts.E.{w1,w2,w3}`;
  linear (default otherwise): every 2-D `.weight` but the token embedding, the router (`mlp.gate`,
    `block_sparse_moe.gate`), `lm_head` and, for fp8-block, `eh_proj` and `shared_head.head`;
  all: linear plus `lm_head` (int only).
The rules, every operation in float32 with round-to-nearest-even (numpy float32 arrays; np.rint
rounds ties to even); sd(x) is x in the scale dtype, the weight's own dtype (BF16 by RNE on the
float32 bits, F32 unchanged):
  int4-g32: per row and group of 32 columns (the last partial), a = max|w|, s = sd(a / 7) (1 if
    0), q = clip(rint(w / s), -8, 7);
  int4-g128-asym: per row and group of 128, lo = min(min w, 0), hi = max(max w, 0),
    s = sd((hi - lo) / 15) (1 if 0), z = clip(rint(-8 - lo / s), -8, 7),
    q = clip(rint(w / s + z), -8, 7);
  packed: weight_packed I32 [rows, ceil(cols / 8)] (column 8j + i in bits 4i..4i+3 of word j as
    q + 8, padding nibbles 0), weight_scale [rows, groups] in the scale dtype, weight_shape I64
    [rows, cols], and (asym) weight_zero_point I32 [ceil(rows / 8), groups] packed along rows;
  fp8-block: per 128 x 128 block (the last ones partial), a = max|w|, s = a / 448 (1 if 0),
    weight F8_E4M3 = e4m3(w / s), weight_scale_inv F32 [ceil(rows / 128), ceil(cols / 128)] = s;
    e4m3(x): sign bit x < 0, |x| >= 448 gives 0x7E, else the nearest of the 127 finite
    non-negative values, a tie to the even code.
numpy only; the safetensors file is written here (header JSON, then little-endian data).
"""
import json
import os
import re
import shutil
import struct
import sys

import numpy as np

# ---------------------------------------------------------------------------------------------
# safetensors

DTYPES = {"F32": "<f4", "BF16": "<u2", "I32": "<i4", "I64": "<i8", "F8_E4M3": "u1", "I8": "i1"}


def read_raw(path):
    """[(name, dtype, shape, raw bytes)] in the file's order, and the __metadata__ (or None)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", None)
    out = []
    for name, info in header.items():
        begin, end = info["data_offsets"]
        out.append((name, info["dtype"], list(info["shape"]), data[begin:end]))
    return out, meta


def write_raw(path, tensors, meta):
    """Writes [(name, dtype, shape, raw bytes)] in that order."""
    header = {}
    if meta is not None:
        header["__metadata__"] = meta
    offset = 0
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, _, raw in tensors:
            f.write(raw)


def to_f32(dtype, shape, raw):
    if dtype == "F32":
        return np.frombuffer(raw, dtype="<f4").reshape(shape).astype(np.float32)
    if dtype == "BF16":
        bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        return bits.view(np.float32).reshape(shape)
    raise SystemExit(f"quant_writer: a weight of dtype {dtype} is not a float checkpoint's")


def bf16_bits(x):
    """float32 -> BF16 bits by round-to-nearest-even on the float32 bits (finite inputs)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def scale_dtype_round(x, dtype):
    """sd(x): x rounded to the scale dtype (the weight's dtype), as float32 values."""
    if dtype == "F32":
        return x.astype(np.float32)
    return (bf16_bits(x).astype(np.uint32) << 16).view(np.float32)


def scale_bytes(s, dtype):
    return bf16_bits(s).tobytes() if dtype == "BF16" else s.astype("<f4").tobytes()


# ---------------------------------------------------------------------------------------------
# e4m3 (float8_e4m3fn)

def e4m3_values():
    """The value of each of the 128 non-negative codes (0x7F NaN: nan)."""
    v = np.empty(128)
    for c in range(128):
        e, m = c >> 3, c & 7
        v[c] = m / 8 * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
    v[127] = np.nan
    return v


E4M3 = e4m3_values()


def e4m3_encode(x):
    """float32 array -> uint8 codes: sign bit x < 0, |x| >= 448 -> 448, else the nearest of the
    127 finite non-negative values, a tie to the even code."""
    x = np.asarray(x, dtype=np.float32)
    a = np.abs(x).astype(np.float64)  # exact
    finite = E4M3[:127]
    hi = np.searchsorted(finite, a, side="left")  # finite[hi - 1] < a <= finite[hi]
    hi = np.minimum(hi, 126)
    lo = np.maximum(hi - 1, 0)
    d_lo, d_hi = a - finite[lo], finite[hi] - a  # exact: a float32 and finite values close by
    code = np.where(d_lo < d_hi, lo, hi)
    tie = d_lo == d_hi
    code = np.where(tie, np.where(lo % 2 == 0, lo, hi), code)
    code = np.where(a >= 448.0, 126, code)
    return (code.astype(np.uint8) | np.where(x < 0, 0x80, 0).astype(np.uint8)).astype(np.uint8)


def e4m3_decode(codes):
    """uint8 codes -> float64 values by the formula (-1)^s 2^(e-7) (1 + m/8), e == 0: 2^-6 m/8;
    a NaN code (0x7F, 0xFF) is refused."""
    c = np.asarray(codes, dtype=np.int64)
    if np.any((c & 0x7F) == 0x7F):
        raise ValueError("an e4m3 NaN code (0x7F/0xFF)")
    s, e, m = c >> 7, (c >> 3) & 15, c & 7
    mag = np.where(e == 0, 2.0 ** -6 * (m / 8.0), 2.0 ** (e - 7.0) * (1.0 + m / 8.0))
    return np.where(s == 1, -mag, mag)


# ---------------------------------------------------------------------------------------------
# int4 packing

def pack_cols(q, offset=8):
    """int [rows, cols] in [-8, 7] -> int32 [rows, ceil(cols / 8)]: column 8j + i in bits
    4i..4i+3 of word j as q + 8, padding nibbles 0."""
    rows, cols = q.shape
    words = -(-cols // 8)
    u = np.zeros((rows, words * 8), dtype=np.uint32)
    u[:, :cols] = (q + offset).astype(np.uint32)
    assert u.max(initial=0) <= 15
    out = np.zeros((rows, words), dtype=np.uint32)
    for i in range(8):
        out |= u[:, i::8] << np.uint32(4 * i)
    return out.view(np.int32)


def unpack_cols(words, cols, offset=8):
    """int32 [rows, words] -> int64 [rows, cols] (q = nibble - 8), the padding cut."""
    u = np.ascontiguousarray(words).view(np.uint32)
    rows, n = u.shape
    out = np.empty((rows, n * 8), dtype=np.int64)
    for i in range(8):
        out[:, i::8] = (u >> np.uint32(4 * i)) & 15
    return out[:, :cols] - offset


def pack_rows(z):
    """int [rows, groups] -> int32 [ceil(rows / 8), groups], packed along rows."""
    return np.ascontiguousarray(pack_cols(np.ascontiguousarray(z.T)).T)


def unpack_rows(words, rows):
    return np.ascontiguousarray(unpack_cols(np.ascontiguousarray(words.T), rows).T)


# ---------------------------------------------------------------------------------------------
# the quantization rules

def groups_of(w, g):
    """w [rows, cols] -> [rows, ngroups, g] padded with nan (the partial last group)."""
    rows, cols = w.shape
    n = -(-cols // g)
    p = np.full((rows, n * g), np.nan, dtype=np.float32)
    p[:, :cols] = w
    return p.reshape(rows, n, g)


def quantize_int4(w, g, symmetric, dtype):
    """(q int [rows, cols], s float32 [rows, groups], z int [rows, groups] or None)."""
    rows, cols = w.shape
    wg = groups_of(w, g)
    f32 = np.float32
    if symmetric:
        a = np.nanmax(np.abs(wg), axis=2)
        s = scale_dtype_round(a / f32(7), dtype)
        s = np.where(s == 0, f32(1), s).astype(f32)
        q = np.clip(np.rint(wg / s[:, :, None]), -8, 7)
        z = None
    else:
        lo = np.minimum(np.nanmin(wg, axis=2), f32(0))
        hi = np.maximum(np.nanmax(wg, axis=2), f32(0))
        s = scale_dtype_round((hi - lo) / f32(15), dtype)
        s = np.where(s == 0, f32(1), s).astype(f32)
        zf = np.clip(np.rint(f32(-8) - lo / s), -8, 7).astype(f32)
        q = np.clip(np.rint((wg / s[:, :, None]).astype(f32) + zf[:, :, None]), -8, 7)
        z = zf.astype(np.int64)
    for arr in (s,):
        assert arr.dtype == np.float32
    q = q.reshape(rows, -1)[:, :cols]
    assert not np.isnan(q).any()
    return q.astype(np.int64), s, z


def quantize_fp8(w):
    """(codes uint8 [rows, cols], s float32 [ceil(rows / 128), ceil(cols / 128)])."""
    rows, cols = w.shape
    br, bc = -(-rows // 128), -(-cols // 128)
    p = np.full((br * 128, bc * 128), np.nan, dtype=np.float32)
    p[:rows, :cols] = w
    blocks = p.reshape(br, 128, bc, 128)
    a = np.nanmax(np.abs(blocks), axis=(1, 3)).astype(np.float32)
    s = (a / np.float32(448)).astype(np.float32)
    s = np.where(s == 0, np.float32(1), s).astype(np.float32)
    x = (blocks / s[:, None, :, None]).astype(np.float32).reshape(br * 128, bc * 128)[:rows, :cols]
    return e4m3_encode(x), s


# ---------------------------------------------------------------------------------------------
# which modules

EXPERT = re.compile(r".*(\.mlp\.experts\.\d+\.(gate|up|down)_proj"
                    r"|\.block_sparse_moe\.experts\.\d+\.w[123])$")


def module_kind(name, arch):
    """'expert', 'lm_head', 'linear' or None (not quantizable) for a module name of the text
    model (without `.weight`)."""
    if EXPERT.match(name):
        return "expert"
    if name == "lm_head":
        return "lm_head"
    if name.endswith("embed_tokens"):
        return None
    if name.endswith(".mlp.gate") or name.endswith(".block_sparse_moe.gate"):
        return None  # a router: DeepSeek's is no Linear, Qwen3-MoE's and Mixtral's stay float
    return "linear"


def chosen(name, arch, roles, fp8):
    kind = module_kind(name, arch)
    if kind is None:
        return False
    if roles == "experts":
        return kind == "expert"
    if kind == "lm_head":
        return roles == "all"
    if fp8 and (name.endswith(".eh_proj") or name.endswith(".shared_head.head")):
        return False
    return True


def quantization_config(fmt, roles, arch, routers, mtp=False):
    if fmt == "fp8-block":
        skip = {"experts": ["self_attn", "shared_experts", "mlp.gate_proj", "mlp.up_proj",
                            "mlp.down_proj"], "linear": []}[roles]
        skip = skip + routers
        cfg = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
               "weight_block_size": [128, 128]}
        if skip:
            cfg["modules_to_not_convert"] = skip
        return cfg
    ignore = {"experts": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
                          "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"],
              "linear": ["lm_head"], "all": []}[roles]
    if roles == "experts" and mtp:
        ignore = ignore + ["re:.*eh_proj$", "re:.*shared_head\\.head$"]
    if arch == "qwen3_moe":
        ignore = ignore + ["re:.*mlp\\.gate$"]
    elif arch == "mixtral":
        ignore = ignore + ["re:.*block_sparse_moe\\.gate$"]
    g, sym = (32, True) if fmt == "int4-g32" else (128, False)
    return {"quant_method": "compressed-tensors", "format": "pack-quantized",
            "quantization_status": "compressed", "kv_cache_scheme": None,
            "config_groups": {"group_0": {"targets": ["Linear"],
                                          "weights": {"type": "int", "num_bits": 4,
                                                      "strategy": "group", "group_size": g,
                                                      "symmetric": sym, "dynamic": False},
                                          "input_activations": None,
                                          "output_activations": None}},
            "ignore": ignore}


ARCHS = {"LlamaForCausalLM": "llama", "Qwen3ForCausalLM": "qwen3", "Qwen3MoeForCausalLM":
         "qwen3_moe", "MixtralForCausalLM": "mixtral", "DeepseekV3ForCausalLM": "deepseek_v3",
         "KimiK25ForConditionalGeneration": "kimi_k25", "LlamaForCausalLMEagle3": "eagle3"}


def convert(src, dst, fmt, roles):
    cfg = json.load(open(os.path.join(src, "config.json")))
    arch = ARCHS.get(cfg["architectures"][0])
    if arch is None:
        raise SystemExit(f"quant_writer: {src}/config.json: architecture "
                         f"{cfg['architectures'][0]} not handled")
    prefix = "language_model." if arch == "kimi_k25" else ""
    if roles is None:
        roles = "experts" if arch in ("qwen3_moe", "mixtral", "deepseek_v3", "kimi_k25") \
            else "linear"
    fp8 = fmt == "fp8-block"
    if fp8 and roles == "all":
        raise SystemExit("quant_writer: --quant-roles all is int only (DeepSeek-V3's FP8 keeps "
                         "lm_head float)")
    tensors, meta = read_raw(os.path.join(src, "model.safetensors"))
    out, routers, n_quantized = [], [], 0
    for name, dtype, shape, raw in tensors:
        mod = name[len(prefix):-len(".weight")] if name.startswith(prefix) and \
            name.endswith(".weight") else None
        if mod is not None and arch in ("qwen3_moe", "mixtral") and \
                (mod.endswith(".mlp.gate") or mod.endswith(".block_sparse_moe.gate")):
            routers.append(mod)
        if mod is None or len(shape) != 2 or not chosen(mod, arch, roles, fp8):
            out.append((name, dtype, shape, raw))
            continue
        w = to_f32(dtype, shape, raw)
        base = name[:-len(".weight")]
        rows, cols = shape
        n_quantized += 1
        if fp8:
            codes, s = quantize_fp8(w)
            out.append((name, "F8_E4M3", shape, codes.tobytes()))
            out.append((base + ".weight_scale_inv", "F32", list(s.shape),
                        s.astype("<f4").tobytes()))
            continue
        g, sym = (32, True) if fmt == "int4-g32" else (128, False)
        q, s, z = quantize_int4(w, g, sym, dtype)
        packed = pack_cols(q)
        out.append((base + ".weight_packed", "I32", list(packed.shape),
                    packed.astype("<i4").tobytes()))
        out.append((base + ".weight_scale", dtype, list(s.shape), scale_bytes(s, dtype)))
        out.append((base + ".weight_shape", "I64", [2], np.array([rows, cols], "<i8").tobytes()))
        if z is not None:
            zp = pack_rows(z)
            out.append((base + ".weight_zero_point", "I32", list(zp.shape),
                        zp.astype("<i4").tobytes()))
    if n_quantized == 0:
        raise SystemExit(f"quant_writer: {src}: no module to quantize with --quant-roles {roles}")
    text = cfg.get("text_config", cfg)
    qc = quantization_config(fmt, roles, arch, routers if roles in ("experts", "linear") and fp8
                             else [], mtp=(text.get("num_nextn_predict_layers") or 0) > 0)
    cfg["quantization_config"] = qc
    os.makedirs(dst, exist_ok=True)
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    if os.path.exists(os.path.join(src, "generation_config.json")):  # an EAGLE-3 head has none
        shutil.copyfile(os.path.join(src, "generation_config.json"),
                        os.path.join(dst, "generation_config.json"))
    write_raw(os.path.join(dst, "model.safetensors"), out, meta)
    print(f"quant_writer: {dst}: {n_quantized} modules {fmt} ({roles})")


# ---------------------------------------------------------------------------------------------
# self test

def self_test():
    known = {0x01: 2.0 ** -9, 0x08: 2.0 ** -6, 0x7E: 448.0, 0x38: 1.0, 0x00: 0.0, 0xFE: -448.0,
             0x07: 7 * 2.0 ** -9, 0x40: 2.0, 0xB8: -1.0}
    for code, value in known.items():
        got = float(e4m3_decode(np.array([code]))[0])
        assert got == value, f"e4m3 {code:#04x}: {got} != {value}"
    neg0 = e4m3_decode(np.array([0x80]))[0]
    assert neg0 == 0 and np.signbit(neg0), "e4m3 0x80 is not -0"
    for nan in (0x7F, 0xFF):
        try:
            e4m3_decode(np.array([nan]))
        except ValueError:
            continue
        raise AssertionError(f"e4m3 {nan:#04x} decoded")
    codes = np.array([c for c in range(256) if c & 0x7F != 0x7F])
    assert len(codes) == 254
    values = e4m3_decode(codes)
    again = e4m3_encode(values.astype(np.float32))
    # -0 (0x80) encodes as 0x00 by the doc's sign rule (x < 0); every other code round-trips.
    expect = np.where(codes == 0x80, 0x00, codes)
    assert np.array_equal(again, expect), codes[again != expect]
    # rounding: midpoints go to the even code, beyond 448 saturates, tiny negatives give 0x80.
    assert e4m3_encode(np.float32(1.0625)) == 0x38  # midway 1 and 1.125: even (0x38)
    assert e4m3_encode(np.float32(1.1875)) == 0x3A  # midway 1.125 (0x39) and 1.25: even 0x3A
    assert e4m3_encode(np.float32(2.0 ** -10)) == 0x00  # midway 0 and 2^-9: even 0x00
    assert e4m3_encode(np.float32(-2.0 ** -11)) == 0x80
    assert e4m3_encode(np.float32(1000.0)) == 0x7E and e4m3_encode(np.float32(-460)) == 0xFE
    assert e4m3_encode(np.float32(1.07)) == 0x39
    # int4: every nibble value at every position of a word, padding cut, along rows too.
    q = np.array([[(r + c) % 16 - 8 for c in range(19)] for r in range(16)])
    packed = pack_cols(q)
    assert packed.shape == (16, 3) and packed.dtype == np.int32
    assert np.array_equal(unpack_cols(packed, 19), q)
    u = packed.view(np.uint32)
    assert np.all(u[:, 2] >> 12 == 0), "padding nibbles are not 0"
    assert u[0, 0] == sum(((c % 16 - 8) + 8) << (4 * c) for c in range(8))
    zp = pack_rows(q[:13])
    assert zp.shape == (2, 19) and np.array_equal(unpack_rows(zp, 13), q[:13])
    # bf16 RNE on the bits: ties to even, carries into the exponent.
    f = np.array([1.0, 1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, 1.0 + 2 ** -8 + 2 ** -20, 3.0 - 2 ** -22],
                 dtype=np.float32)
    assert list(bf16_bits(f)) == [0x3F80, 0x3F80, 0x3F82, 0x3F81, 0x4040], list(bf16_bits(f))
    # the int rules on a tiny case by hand: a = 0.7 -> s = 0.1 (F32), q = rint(w / s).
    w = np.array([[0.7, -0.35, 0.05, 0.0]], dtype=np.float32)
    q, s, z = quantize_int4(w, 32, True, "F32")
    assert z is None and s[0, 0] == np.float32(0.7) / np.float32(7)
    assert list(q[0]) == list(np.clip(np.rint(w[0] / s[0, 0]), -8, 7).astype(int))
    q, s, z = quantize_int4(np.zeros((1, 5), np.float32), 32, False, "BF16")
    assert s[0, 0] == 1 and z[0, 0] == -8 and np.all(q == -8)
    print("quant_writer self-test: ok (e4m3 254 codes round-trip, known values, int4 nibbles)")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return 0
    args = sys.argv[1:]
    pos = [a for i, a in enumerate(args) if not a.startswith("--") and
           (i == 0 or not args[i - 1].startswith("--"))]
    opts = dict(zip(args[::1], args[1::1]))
    fmt, roles = opts.get("--quantize"), opts.get("--quant-roles")
    if len(pos) != 2 or fmt not in ("int4-g32", "int4-g128-asym", "fp8-block") or \
            roles not in (None, "experts", "linear", "all"):
        raise SystemExit(__doc__)
    convert(pos[0], pos[1], fmt, roles)
    return 0


if __name__ == "__main__":
    sys.exit(main())
