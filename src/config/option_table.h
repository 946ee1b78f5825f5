// The option table: every JobConfig option declared once, with its section, key, help text and
// validation. Defaults are not repeated here; they are the member initializers in job_config.h
// (decode's draft shape: config/draft_shape.h).
// TOML reading, --set, help, dumps and hashing all walk this table with for_each_option, so a
// new option is one line here plus one member in job_config.h.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "config/job_config.h"

namespace specrun {

// What may be set for one option. Member types supported by the visitors: bool, int,
// std::int64_t, double, std::string, ConfigPath, std::vector<std::string>.
struct OptionSpec {
  OptionSpec(const char* section_name, const char* key_name, const char* help_text)
      : section(section_name), key(key_name), help(help_text) {}

  const char* section;
  const char* key;
  const char* help;
  double min = -std::numeric_limits<double>::infinity();  // numbers: inclusive unless
  double max = std::numeric_limits<double>::infinity();   // min_exclusive
  bool min_exclusive = false;
  bool non_empty = false;            // strings, paths and lists: "" / [] is not allowed
  std::vector<std::string> choices;  // strings and list elements: the allowed values
  bool integers_as_text = false;     // lists: integer elements are kept as their decimal text

  std::string name() const { return std::string(section) + "." + key; }

  OptionSpec&& range(double lo, double hi) && {
    min = lo;
    max = hi;
    return std::move(*this);
  }
  OptionSpec&& above(double lo, double hi) && {  // (lo, hi]
    min = lo;
    max = hi;
    min_exclusive = true;
    return std::move(*this);
  }
  OptionSpec&& one_of(std::initializer_list<const char*> values) && {
    choices.assign(values.begin(), values.end());
    return std::move(*this);
  }
  OptionSpec&& ids_or_strings() && {  // a list of token ids and token strings
    integers_as_text = true;
    return std::move(*this);
  }
  OptionSpec&& required() && {
    non_empty = true;
    return std::move(*this);
  }
};

// The type of a member as the help text and error messages name it.
inline const char* option_type_name(const bool&) {
  return "boolean";
}
inline const char* option_type_name(const int&) {
  return "integer";
}
inline const char* option_type_name(const std::int64_t&) {
  return "integer";
}
inline const char* option_type_name(const double&) {
  return "float";
}
inline const char* option_type_name(const std::string&) {
  return "string";
}
inline const char* option_type_name(const ConfigPath&) {
  return "path";
}
inline const char* option_type_name(const std::vector<std::string>&) {
  return "list of strings";
}

// Section names in table order.
inline const std::vector<std::string>& config_sections() {
  static const std::vector<std::string> kSections = {"job",  "target", "draft",   "parallel",
                                                     "data", "decode", "dataset", "debug"};
  return kSections;
}

// Calls visit(const OptionSpec&, Member&) for every option of `config`, in table order.
// `Config` is JobConfig or const JobConfig.
template <class Config, class Visitor>
void for_each_option(Config& config, Visitor&& visit) {
  using S = OptionSpec;
  // [job]
  visit(S{"job", "name", "Name of the job, stored in the result file."}.required(),
        config.job.name);
  visit(S{"job", "output", "HDF5 result file to write."}.required(), config.job.output);
  visit(S{"job", "seed", "Seed of the counter-based random numbers (sampling)."}.range(0, 9.0e15),
        config.job.seed);
  visit(S{"job", "overwrite", "Replace an existing result file instead of stopping with an error."},
        config.job.overwrite);
  // [target]
  visit(S{"target", "path", "Target model: Hugging Face directory (config.json, *.safetensors)."}
            .required(),
        config.target.path);
  visit(S{"target", "dtype", "Weight type to compute with; auto = as stored in the checkpoint."}
            .one_of({"auto", "f32", "bf16", "f16"}),
        config.target.dtype);
  // [draft]
  visit(S{"draft", "kind", "Drafter, by name (the kinds are listed below); none = baseline only."}
            .required(),
        config.draft.kind);
  visit(S{"draft", "path",
          "Draft model directory (kind = model), head directory (kind = eagle3), or MTP "
          "checkpoint (kind = mtp; empty = the target's directory); same vocabulary as the "
          "target."},
        config.draft.path);
  visit(S{"draft", "placement",
          "sharded = split over the tp group like the target; replicated = whole draft on every "
          "rank (no communication)."}
            .one_of({"sharded", "replicated"}),
        config.draft.placement);
  visit(S{"draft", "mtp_chain_hidden",
          "kind = mtp: the hidden state a chain's next step reads, the module's output before "
          "shared_head.norm (pre_norm, vLLM) or after it (shared_head_norm, SGLang)."}
            .one_of({"pre_norm", "shared_head_norm"}),
        config.draft.mtp_chain_hidden);
  visit(S{"draft", "ngram_max",
          "kind = ngram: the longest suffix of the sequence looked up in its earlier tokens."}
            .range(1, 64),
        config.draft.ngram_max);
  visit(
      S{"draft", "ngram_min", "kind = ngram: the shortest suffix looked up (<= ngram_max)."}.range(
          1, 64),
      config.draft.ngram_min);
  // [parallel]
  visit(S{"parallel", "tp", "Tensor-parallel degree; the number of ranks must be a multiple of it."}
            .range(1, 1024),
        config.parallel.tp);
  visit(S{"parallel", "ep",
          "Mixture-of-experts models: expert-parallel ranks. 0 = tp (the routed experts split "
          "over the tensor-parallel ranks, each rank computing its own experts); 1 = every expert "
          "on every rank, each expert's intermediate dimension split by tp. Other values are "
          "refused."}
            .range(0, 1024),
        config.parallel.ep);
  visit(S{"parallel", "backend", "cpu = MPI on host buffers; cuda = NCCL on GPUs (CUDA build)."}
            .one_of({"cpu", "cuda"}),
        config.parallel.backend);
  visit(
      S{"parallel", "threads", "CPU compute threads per rank; 0 = cores on the node / local ranks."}
          .range(0, 1024),
      config.parallel.threads);
  visit(S{"parallel", "comm_timeout_s",
          "Seconds a collective may take before the job fails (one between dp groups, which wait "
          "for each other at batch boundaries: once a rank it waits for is stopped or dead)."}
            .above(0, 86400),
        config.parallel.comm_timeout_s);
  visit(S{"parallel", "cuda_graphs",
          "backend = cuda: issue each decode, verify and drafting pass (at most 64 tokens, or 512 "
          "with every projection on the tensor cores; with tp > 1 its NCCL collectives inside) as "
          "a CUDA graph captured once per shape; false: launch by launch."},
        config.parallel.cuda_graphs);
  visit(S{"parallel", "cuda_pdl",
          "backend = cuda, on GPUs of compute capability 9.0 on: the kernels of a step graph "
          "start while the kernel before them finishes (programmatic dependent launch: the "
          "projections' weights stream in meanwhile, the small kernels' launch is hidden); "
          "false: each waits for the previous kernel to end."},
        config.parallel.cuda_pdl);
  visit(S{"parallel", "cuda_tensor_cores",
          "backend = cuda: the projections of decode and verify passes (BF16 weights) on the "
          "tensor cores, activations split into three BF16 parts (float32 precision, sums in "
          "another order than the CUDA cores'); false: float32 FMA on the CUDA cores."},
        config.parallel.cuda_tensor_cores);
  visit(S{"parallel", "cuda_fused_ops",
          "backend = cuda: RoPE inside the KV append and attention, RMSNorm inside the "
          "projections after it and the residual add in the epilogue of those before it "
          "(bitwise the separate kernels, fewer launches); false: the separate kernels, e.g. to "
          "tell whether a fault on a new GPU is in the fused ones."},
        config.parallel.cuda_fused_ops);
  // [data]
  visit(S{"data", "prompts", "HDF5 prompt file (make one with `specrun prepare`)."}.required(),
        config.data.prompts);
  visit(S{"data", "batch_size", "Sequences decoded together by one tensor-parallel group."}.range(
            1, 4096),
        config.data.batch_size);
  visit(S{"data", "max_prompts", "Use only the first N prompts of the file; 0 = all."}.range(
            0, 9.0e15),
        config.data.max_prompts);
  // [decode]
  visit(S{"decode", "modes",
          "Modes to run on the same prompts, in order: baseline (target only), speculative; or "
          "dataset alone (a generation job writing hidden states: [dataset])."}
            .one_of({"baseline", "speculative", "dataset"})
            .required(),
        config.decode.modes);
  visit(S{"decode", "max_new_tokens", "Tokens to generate per prompt (fewer when EOS stops it)."}
            .range(1, 1 << 20),
        config.decode.max_new_tokens);
  visit(
      S{"decode", "draft_len", "Tokens the draft proposes per speculative step (k)."}.range(1, 16),
      config.decode.shape.draft_len);
  visit(S{"decode", "tree_top_k",
          "Draft trees: children of each expanded node (EAGLE's top_k); 1 = a chain of draft_len."}
            .range(1, 64),
        config.decode.shape.tree_top_k);
  visit(S{"decode", "tree_depth",
          "Draft trees: most drafted tokens on one path (SGLang's num_steps; EAGLE's depth + 1)."}
            .range(1, 16),
        config.decode.shape.tree_depth);
  visit(S{"decode", "tree_nodes",
          "Draft trees: drafted nodes, root excluded (SGLang's num_draft_tokens - 1)."}
            .range(1, 256),
        config.decode.shape.tree_nodes);
  visit(S{"decode", "temperature", "Sampling temperature; 0 = greedy (argmax)."}.range(0, 100),
        config.decode.temperature);
  visit(S{"decode", "top_k", "Keep only the k most likely tokens before sampling; 0 = off."}.range(
            0, 1 << 24),
        config.decode.top_k);
  visit(S{"decode", "top_p", "Nucleus sampling: smallest set with mass >= top_p; 1.0 = off."}.above(
            0, 1),
        config.decode.top_p);
  visit(S{"decode", "stop_at_eos",
          "Finish a sequence when it emits an EOS token (the target's config.json and "
          "generation_config.json eos_token_id, and decode.stop_tokens)."},
        config.decode.stop_at_eos);
  visit(S{"decode", "stop_tokens",
          "More tokens that finish a sequence: ids (128009) or token strings (\"<|im_end|>\", "
          "looked up in the target's tokenizer)."}
            .ids_or_strings(),
        config.decode.stop_tokens);
  visit(S{"decode", "acceptance",
          "real (the verifier decides), or synthetic: fixed:L (every step accepts L drafted "
          "tokens) or rates:r1,r2,... (position i accepted with probability ri given i-1 were), "
          "seeded; the outputs are then meaningless, the costs real (docs/analysis.md)."}
            .required(),
        config.decode.acceptance);
  visit(S{"decode", "alarm_steps",
          "Speculative acceptance alarm: after this many verify steps (summed over the "
          "sequences), an acceptance of 0 or a tau of 1.00 is a warning said once and recorded "
          "in the result file; 0 = off."}
            .range(0, 1 << 30),
        config.decode.alarm_steps);
  visit(S{"decode", "min_tau",
          "Stop the job (exit 1, the result file keeping every batch written) when tau after "
          "decode.alarm_steps verify steps is below this; 0 = never."}
            .range(0, 64),
        config.decode.min_tau);
  // [dataset]
  visit(S{"dataset", "hidden_layers",
          "Layers whose hidden states a dataset job keeps: eagle3 (EAGLE-3's three), none, ids "
          "\"2,3,4,final\" (id i = the input of layer i; final = the final norm's output), or "
          "\"eagle3,final\" (the training data of scripts/train_eagle3.py)."}
            .required(),
        config.dataset.hidden_layers);
  visit(S{"dataset", "positions",
          "Positions kept: all, prompt (rows predicting prompt tokens), generated."}
            .one_of({"all", "prompt", "generated"}),
        config.dataset.positions);
  visit(S{"dataset", "dtype", "Hidden states on disk: bf16, f16 or f32."}.one_of(
            {"bf16", "f16", "f32"}),
        config.dataset.dtype);
  visit(S{"dataset", "topk", "Keep the target's k most likely next tokens per position; 0 = none."}
            .range(0, 1024),
        config.dataset.topk);
  visit(S{"dataset", "topk_dtype", "Their probabilities on disk: f16, bf16 or f32."}.one_of(
            {"f16", "bf16", "f32"}),
        config.dataset.topk_dtype);
  visit(S{"dataset", "compression",
          "Chunk compression: gzip (HDF5's own; default, level 1), lz4 (HDF5 plugin) or none."}
            .one_of({"gzip", "lz4", "none"}),
        config.dataset.compression);
  visit(S{"dataset", "level", "gzip level (1 = fastest, 9 = smallest)."}.range(1, 9),
        config.dataset.level);
  visit(S{"dataset", "chunk_rows", "Positions per compressed chunk of the hidden states."}.range(
            1, 1 << 20),
        config.dataset.chunk_rows);
  visit(S{"dataset", "continuous",
          "Continuous batching: a finished sequence's slot takes the next prompt at once "
          "(false: static batches, for comparison)."},
        config.dataset.continuous);
  visit(S{"dataset", "commit_s",
          "Seconds between commits: the open part file of each shard is sealed (closed, renamed) "
          "this often; a kill loses at most this much work per group."}
            .range(0, 86400),
        config.dataset.commit_s);
  // [debug]
  visit(S{"debug", "inject_delay_ms",
          "TEST ONLY: milliseconds to spin in inject_phase on every step (fakes slower code)."}
            .range(0, 60000),
        config.debug.inject_delay_ms);
  visit(S{"debug", "inject_phase", "TEST ONLY: phase that spins inject_delay_ms per step."}.one_of(
            {"none", "draft", "verify", "sample"}),
        config.debug.inject_phase);
  visit(S{"debug", "fingerprints",
          "MEASUREMENT ONLY: false skips hashing the model files (the result's models attribute "
          "then holds paths only; compare cannot tell a replaced checkpoint)."},
        config.debug.fingerprints);
}

}  // namespace specrun
