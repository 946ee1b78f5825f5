// Import of llama2.c checkpoints (the "legacy v0" .bin that run.c reads, docs/reference.md,
// "llama2.c checkpoints and tokenizer") into the Hugging Face layout: config.json +
// model.safetensors.
//
// The .bin holds a 28-byte header (7 x int32: dim, hidden_dim, n_layers, n_heads, n_kv_heads,
// vocab_size, seq_len; a negative vocab_size means a separate classifier), then float32 arrays
// in a fixed order, including freq_cis_real/imag, which are skipped. llama2.c rotates
// interleaved pairs (2j, 2j+1); HF rotates (j, j + head_dim/2). The rows of wq and wk are
// permuted per head so that an HF-convention forward pass gives the same attention:
//   W_hf[h*hd + c*(hd/2) + j, :] = W_meta[h*hd + 2j + c, :]   (c in {0,1}, j < hd/2).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu/dtype.h"
#include "model/model_config.h"

namespace specrun {

struct Llama2cHeader {
  int dim = 0;
  int hidden_dim = 0;
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int vocab_size = 0;  // absolute value
  int seq_len = 0;
  bool shared_classifier = true;  // vocab_size was positive in the file

  int head_size() const { return dim / n_heads; }
  int kv_dim() const { return head_size() * n_kv_heads; }
  // Bytes the file must have: header plus every float32 array (freq_cis included).
  std::uint64_t expected_file_size() const;
};

// Reads and validates the header of `path`; throws naming the file for a bad or newer-version
// header (llama2.c --version 1/2 exports start with the magic "ak42") or a size that does not
// match the header (truncated file).
Llama2cHeader read_llama2c_header(const std::string& path);

// The row of a llama2.c wq/wk matrix that becomes row `hf_row` of the HF matrix (per head of
// `head_dim` rows, see the formula above).
std::int64_t llama2c_row_for_hf_row(std::int64_t hf_row, int head_dim);

struct Llama2cImportOptions {
  std::string tokenizer_path;  // llama2.c tokenizer .bin copied to OUTDIR/tokenizer.bin; "" = none
  DType dtype = DType::kF32;   // F32 (exact) or BF16
};

// Converts `model_bin` into `outdir` (created if needed): config.json (LlamaForCausalLM,
// rms_norm_eps 1e-5, rope_theta 10000, max_position_embeddings = seq_len, bos 1, eos 2,
// tie_word_embeddings when the classifier is shared, in which case lm_head.weight is omitted),
// generation_config.json, model.safetensors, and tokenizer.bin when a tokenizer is given
// (validated against the vocab size first). Returns the written configuration.
ModelConfig import_llama2c(const std::string& model_bin, const std::string& outdir,
                           const Llama2cImportOptions& options = {});
// The files import_llama2c writes (it replaces existing ones, each through a temporary file and
// a rename: common/atomic_output.h): what `specrun import-llama2c` checks before converting.
std::vector<std::string> import_llama2c_outputs(const std::string& outdir,
                                                const Llama2cImportOptions& options = {});

}  // namespace specrun
