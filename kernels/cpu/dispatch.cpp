// The entry points of ops.h: each forwards to the variant chosen once (dispatch.h). Compiled for
// the baseline.
#include "kernels/cpu/dispatch.h"

#include <cstdlib>
#include <new>
#include <utility>
#include <vector>

namespace specrun::cpu {

// Each variant's table (kernels/cpu/variant_table.cpp, compiled once per variant).
namespace baseline {
extern const KernelTable kTable;
}
#if defined(__x86_64__)
namespace avx2 {
extern const KernelTable kTable;
}
namespace avx512 {
extern const KernelTable kTable;
}
#endif

namespace {

const std::vector<std::pair<Isa, const KernelTable*>>& tables() {
  static const std::vector<std::pair<Isa, const KernelTable*>> all = {
    {Isa::kBaseline, &baseline::kTable},
#if defined(__x86_64__)
    {Isa::kAvx2, &avx2::kTable},
    {Isa::kAvx512, &avx512::kTable},
#endif
  };
  return all;
}

std::string variant_list(bool supported_only) {
  std::string names;
  for (Isa isa : built_isas())
    if (!supported_only || cpu_supports(isa))
      names += (names.empty() ? "" : ", ") + std::string(isa_name(isa));
  return names;
}

KernelChoice choose() {
  KernelChoice c{best_isa(), best_isa(), false};
  const char* request = std::getenv(kIsaEnvironmentVariable);
  if (request == nullptr || *request == '\0') return c;
  const std::optional<Isa> isa = parse_isa(request);
  if (!isa || kernels_for(*isa) == nullptr)
    throw IsaError(std::string(kIsaEnvironmentVariable) + "=" + request +
                   " is not a kernel variant of this build; use one of: " + variant_list(false) +
                   " (or unset it for the best this CPU supports, " + isa_name(c.best) + ")");
  if (!cpu_supports(*isa))
    throw IsaError(std::string(kIsaEnvironmentVariable) + "=" + request + ": this CPU (" +
                   cpu_model_name() + ") lacks " + missing_features(*isa) +
                   "; it supports: " + variant_list(true) + " (unset " + kIsaEnvironmentVariable +
                   " for the best, " + isa_name(c.best) + ")");
  c.isa = *isa;
  c.forced = true;
  return c;
}

}  // namespace

[[noreturn]] void throw_out_of_memory(std::size_t bytes) {
  (void)bytes;
  throw std::bad_alloc();
}

const KernelTable* kernels_for(Isa isa) {
  for (const auto& [i, table] : tables())
    if (i == isa) return table;
  return nullptr;
}

const KernelChoice& select_kernels() {
  static const KernelChoice choice = choose();  // a throw leaves it for the next call
  return choice;
}

const KernelTable& kernels() {
  static const KernelTable* const active = kernels_for(select_kernels().isa);
  return *active;
}

std::string describe_kernel_choice() {
  try {
    const KernelChoice& c = select_kernels();
    if (!c.forced) return std::string(isa_name(c.isa)) + " (best for this CPU)";
    return std::string(isa_name(c.isa)) + " (forced by " + kIsaEnvironmentVariable +
           "; best for this CPU: " + isa_name(c.best) + ")";
  } catch (const std::exception& e) {
    return std::string("error: ") + e.what();
  }
}

// The entry points --------------------------------------------------------------------------

void matmul(const float* x, int n_tokens, const PackedWeights& w, const float* bias, float* y) {
  kernels().matmul(x, n_tokens, w, bias, y);
}

void matmul_multi(const float* x, int n_tokens, const MatmulOutput* outputs, int n_outputs) {
  kernels().matmul_multi(x, n_tokens, outputs, n_outputs);
}

void matmul_grouped(const MatmulGroup* groups, int n_groups) {
  kernels().matmul_grouped(groups, n_groups);
}

void gather_rows(const void* table, DType dtype, std::int64_t row_begin, std::int64_t n_rows,
                 int dim, const std::int32_t* ids, int n_tokens, float* out) {
  kernels().gather_rows(table, dtype, row_begin, n_rows, dim, ids, n_tokens, out);
}

void gather_rows_packed(const PackedWeights& table, std::int64_t row_begin, const std::int32_t* ids,
                        int n_tokens, float* out) {
  kernels().gather_rows_packed(table, row_begin, ids, n_tokens, out);
}

void rmsnorm(const float* x, int n_tokens, int dim, const void* w, DType w_dtype, float eps,
             float* y) {
  kernels().rmsnorm(x, n_tokens, dim, w, w_dtype, eps, y);
}

void add_rmsnorm(float* x, const float* delta, int n_tokens, int dim, const void* w, DType w_dtype,
                 float eps, float* y) {
  kernels().add_rmsnorm(x, delta, n_tokens, dim, w, w_dtype, eps, y);
}

void rope(float* x, int n_tokens, int n_heads, int head_dim, std::int64_t row_stride,
          const float* inv_freq, const std::int32_t* positions) {
  kernels().rope(x, n_tokens, n_heads, head_dim, row_stride, inv_freq, positions);
}

void rope_table(const float* inv_freq, int head_dim, const std::int32_t* positions, int n_tokens,
                float* cos_sin) {
  kernels().rope_table(inv_freq, head_dim, positions, n_tokens, cos_sin);
}

void rope_apply(float* x, int n_tokens, int n_heads, int head_dim, std::int64_t row_stride,
                const float* cos_sin) {
  kernels().rope_apply(x, n_tokens, n_heads, head_dim, row_stride, cos_sin);
}

void attention(const float* q, int n_tokens, int n_heads, int n_kv_heads, int key_dim,
               int value_dim, const float* k, const float* v, int start, float* out) {
  kernels().attention(q, n_tokens, n_heads, n_kv_heads, key_dim, value_dim, k, v, start, out);
}

void attention_strided(const float* q, int n_tokens, int n_heads, int n_kv_heads, int key_dim,
                       int value_dim, const float* k, std::int64_t k_stride, const float* v,
                       std::int64_t v_stride, float scale, int start, float* out) {
  kernels().attention_strided(q, n_tokens, n_heads, n_kv_heads, key_dim, value_dim, k, k_stride, v,
                              v_stride, scale, start, out);
}

void silu_mul(const float* gate, const float* up, float* out, std::size_t n) {
  kernels().silu_mul(gate, up, out, n);
}

void add_inplace(float* y, const float* x, std::size_t n) {
  kernels().add_inplace(y, x, n);
}

int argmax(const float* x, int n) {
  return kernels().argmax(x, n);
}

float stream_read(const float* data, std::size_t n, int kernel) {
  return kernels().stream_read(data, n, kernel);
}

void softmax(float* x, int n) {
  kernels().softmax(x, n);
}

const char* read_kernel_name(int kernel) {
  switch (kernel) {
    case 0:
      return "wide";
    case 1:
      return "wide+prefetch";
    case 2:
      return "4 streams+prefetch";
  }
  return "?";
}

}  // namespace specrun::cpu
