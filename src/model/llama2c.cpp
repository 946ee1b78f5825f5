// llama2.c .bin -> HF safetensors conversion.
#include "model/llama2c.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <vector>

#include "common/atomic_output.h"
#include "common/error.h"
#include "model/safetensors.h"
#include "text/tokenizer.h"

namespace specrun {

namespace {

constexpr std::uint32_t kVersionedMagic = 0x616b3432;  // "ak42": llama2.c --version 1/2 exports

std::vector<std::byte> encode(const float* src, std::size_t n, DType dtype) {
  std::vector<std::byte> out(n * dtype_size(dtype));
  if (dtype == DType::kF32) {
    std::memcpy(out.data(), src, out.size());
  } else if (dtype == DType::kBF16) {
    for (std::size_t i = 0; i < n; ++i) {
      std::uint16_t b = f32_to_bf16(src[i]);
      std::memcpy(out.data() + 2 * i, &b, 2);
    }
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      std::uint16_t h = f32_to_f16(src[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

}  // namespace

std::uint64_t Llama2cHeader::expected_file_size() const {
  const std::uint64_t D = static_cast<std::uint64_t>(dim), L = static_cast<std::uint64_t>(n_layers);
  const std::uint64_t V = static_cast<std::uint64_t>(vocab_size);
  const std::uint64_t F = static_cast<std::uint64_t>(hidden_dim);
  const std::uint64_t KV = static_cast<std::uint64_t>(kv_dim());
  std::uint64_t floats =
      V * D             // token_embedding_table
      + L * D           // rms_att_weight
      + L * D * D       // wq
      + 2 * L * KV * D  // wk, wv
      + L * D * D       // wo
      + L * D           // rms_ffn_weight
      + 3 * L * F * D   // w1, w2, w3
      + D               // rms_final_weight
      + static_cast<std::uint64_t>(seq_len) * static_cast<std::uint64_t>(head_size());  // freq_cis
  if (!shared_classifier) floats += V * D;
  return 28 + 4 * floats;
}

Llama2cHeader read_llama2c_header(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  SPEC_INPUT_CHECK(in.good(), "cannot open llama2.c checkpoint " << path);
  std::int32_t h[7] = {};
  in.read(reinterpret_cast<char*>(h), sizeof(h));
  SPEC_INPUT_CHECK(in.gcount() == static_cast<std::streamsize>(sizeof(h)),
                   path << ": shorter than the 28-byte llama2.c header: not a llama2.c checkpoint");
  std::uint32_t magic;
  std::memcpy(&magic, h, 4);
  SPEC_INPUT_CHECK(magic != kVersionedMagic,
                   path << ": this is a llama2.c --version " << h[1]
                        << " export (\"ak42\" header); only the legacy version 0 format that run.c "
                           "reads is supported: re-export with `export.py --version 0`");
  Llama2cHeader hd;
  hd.dim = h[0];
  hd.hidden_dim = h[1];
  hd.n_layers = h[2];
  hd.n_heads = h[3];
  hd.n_kv_heads = h[4];
  hd.shared_classifier = h[5] > 0;
  hd.vocab_size = h[5] == std::numeric_limits<std::int32_t>::min() ? 0 : std::abs(h[5]);
  hd.seq_len = h[6];
  SPEC_INPUT_CHECK(
      hd.dim > 0 && hd.hidden_dim > 0 && hd.n_layers > 0 && hd.n_heads > 0 && hd.n_kv_heads > 0 &&
          hd.vocab_size > 0 && hd.seq_len > 0 && hd.dim <= 1 << 20 && hd.hidden_dim <= 1 << 22 &&
          hd.n_layers <= 4096 && hd.vocab_size <= 1 << 24 && hd.seq_len <= 1 << 24,
      path << ": implausible llama2.c header (dim=" << h[0] << ", hidden_dim=" << h[1]
           << ", n_layers=" << h[2] << ", n_heads=" << h[3] << ", n_kv_heads=" << h[4]
           << ", vocab_size=" << h[5] << ", seq_len=" << h[6] << "): not a llama2.c checkpoint");
  SPEC_INPUT_CHECK(
      hd.dim % hd.n_heads == 0 && hd.n_heads % hd.n_kv_heads == 0 && hd.head_size() % 2 == 0,
      path << ": header has dim=" << hd.dim << ", n_heads=" << hd.n_heads
           << ", n_kv_heads=" << hd.n_kv_heads
           << ": dim must be a multiple of n_heads, n_heads of n_kv_heads, and the "
              "head size even");
  std::error_code ec;
  const std::uint64_t size = std::filesystem::file_size(path, ec);
  SPEC_INPUT_CHECK(!ec, "cannot stat " << path << ": " << ec.message());
  const std::uint64_t expected = hd.expected_file_size();
  SPEC_INPUT_CHECK(size >= expected,
                   path << ": file is " << size << " bytes but its header (dim=" << hd.dim
                        << ", hidden_dim=" << hd.hidden_dim << ", n_layers=" << hd.n_layers
                        << ", vocab_size=" << h[5] << ", seq_len=" << hd.seq_len << ") needs "
                        << expected << " bytes: the file is truncated");
  SPEC_INPUT_CHECK(size == expected,
                   path << ": file is " << size << " bytes but its header needs exactly "
                        << expected
                        << ": not a legacy (version 0) llama2.c checkpoint, or corrupt");
  return hd;
}

std::int64_t llama2c_row_for_hf_row(std::int64_t hf_row, int head_dim) {
  const std::int64_t half = head_dim / 2;
  const std::int64_t head = hf_row / head_dim;
  const std::int64_t r = hf_row % head_dim;
  const std::int64_t c = r / half;
  const std::int64_t j = r % half;
  return head * head_dim + 2 * j + c;
}

std::vector<std::string> import_llama2c_outputs(const std::string& outdir,
                                                const Llama2cImportOptions& options) {
  std::vector<std::string> files = {outdir + "/model.safetensors", outdir + "/config.json",
                                    outdir + "/generation_config.json"};
  if (!options.tokenizer_path.empty()) files.push_back(outdir + "/tokenizer.bin");
  return files;
}

ModelConfig import_llama2c(const std::string& model_bin, const std::string& outdir,
                           const Llama2cImportOptions& options) {
  const Llama2cHeader hd = read_llama2c_header(model_bin);
  SPEC_INPUT_CHECK(options.dtype == DType::kF32 || options.dtype == DType::kBF16,
                   "import-llama2c: --dtype must be f32 or bf16");
  if (!options.tokenizer_path.empty()) {
    // Fails early, naming the file, when the tokenizer does not fit this model.
    load_llama2c_tokenizer(options.tokenizer_path, hd.vocab_size);
  }

  // The whole file as floats (after the header); run.c maps it the same way.
  std::vector<float> w((hd.expected_file_size() - 28) / 4);
  {
    std::ifstream in(model_bin, std::ios::binary);
    in.seekg(28);
    in.read(reinterpret_cast<char*>(w.data()), static_cast<std::streamsize>(w.size() * 4));
    SPEC_INPUT_CHECK(in.gcount() == static_cast<std::streamsize>(w.size() * 4),
                     "reading " << model_bin << " failed after " << in.gcount() << " bytes");
  }
  const std::int64_t D = hd.dim, F = hd.hidden_dim, V = hd.vocab_size, KV = hd.kv_dim();
  const std::int64_t L = hd.n_layers, HS = hd.head_size();
  const float* p = w.data();
  auto take = [&](std::int64_t n) {
    const float* at = p;
    p += n;
    return at;
  };
  const float* emb = take(V * D);
  const float* rms_att = take(L * D);
  const float* wq = take(L * D * D);
  const float* wk = take(L * KV * D);
  const float* wv = take(L * KV * D);
  const float* wo = take(L * D * D);
  const float* rms_ffn = take(L * D);
  const float* w1 = take(L * F * D);
  const float* w2 = take(L * D * F);
  const float* w3 = take(L * F * D);
  const float* rms_final = take(D);
  take(hd.seq_len * HS);  // freq_cis_real and freq_cis_imag, seq_len*head_size/2 each
  const float* wcls = hd.shared_classifier ? emb : take(V * D);
  SPEC_CHECK(p == w.data() + w.size(), "llama2.c layout arithmetic is inconsistent");

  const DType dt = options.dtype;
  std::vector<TensorToWrite> tensors;
  auto add = [&](const std::string& name, std::vector<std::int64_t> shape, const float* src) {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    tensors.push_back({name, dt, shape, encode(src, static_cast<std::size_t>(n), dt)});
  };
  // wq/wk rows into HF rotary order.
  auto add_permuted = [&](const std::string& name, std::int64_t rows, const float* src) {
    std::vector<float> permuted(static_cast<std::size_t>(rows * D));
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t from = llama2c_row_for_hf_row(r, static_cast<int>(HS));
      std::memcpy(&permuted[static_cast<std::size_t>(r * D)], src + from * D,
                  static_cast<std::size_t>(D) * sizeof(float));
    }
    add(name, {rows, D}, permuted.data());
  };
  add("model.embed_tokens.weight", {V, D}, emb);
  for (std::int64_t l = 0; l < L; ++l) {
    const std::string pre = "model.layers." + std::to_string(l) + ".";
    add_permuted(pre + "self_attn.q_proj.weight", D, wq + l * D * D);
    add_permuted(pre + "self_attn.k_proj.weight", KV, wk + l * KV * D);
    add(pre + "self_attn.v_proj.weight", {KV, D}, wv + l * KV * D);
    add(pre + "self_attn.o_proj.weight", {D, D}, wo + l * D * D);
    add(pre + "mlp.gate_proj.weight", {F, D}, w1 + l * F * D);
    add(pre + "mlp.up_proj.weight", {F, D}, w3 + l * F * D);
    add(pre + "mlp.down_proj.weight", {D, F}, w2 + l * D * F);
    add(pre + "input_layernorm.weight", {D}, rms_att + l * D);
    add(pre + "post_attention_layernorm.weight", {D}, rms_ffn + l * D);
  }
  add("model.norm.weight", {D}, rms_final);
  if (!hd.shared_classifier) add("lm_head.weight", {V, D}, wcls);

  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.model_type = "llama";
  c.hidden_size = hd.dim;
  c.intermediate_size = hd.hidden_dim;
  c.num_layers = hd.n_layers;
  c.num_heads = hd.n_heads;
  c.num_kv_heads = hd.n_kv_heads;
  c.head_dim = static_cast<int>(HS);
  c.vocab_size = hd.vocab_size;
  c.max_position_embeddings = hd.seq_len;
  c.rms_norm_eps = 1e-5f;  // hard-coded in run.c
  c.rope_theta = 10000.0;  // hard-coded in run.c
  c.tie_word_embeddings = hd.shared_classifier;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};

  create_output_folder(outdir);
  write_safetensors(outdir + "/model.safetensors", tensors);
  const OutputPolicy replace{true, {}, "model file"};
  write_file_atomically(outdir + "/config.json", c.to_json_text(), replace);
  write_file_atomically(outdir + "/generation_config.json",
                        "{\n  \"bos_token_id\": 1,\n  \"eos_token_id\": 2\n}\n", replace);
  if (!options.tokenizer_path.empty()) {
    std::ifstream in(options.tokenizer_path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    SPEC_INPUT_CHECK(in.good() || in.eof(), "cannot read " << options.tokenizer_path);
    write_file_atomically(outdir + "/tokenizer.bin", bytes, replace);
  }
  return c;
}

}  // namespace specrun
