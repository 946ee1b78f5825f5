// argmax (lowest index wins ties) and softmax over one float32 row.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/ops.h"

namespace specrun::cpu {

int argmax(const float* x, int n) {
  int best = 0;
  float best_value = x[0];
  for (int i = 1; i < n; ++i) {
    // Strictly greater keeps the lowest index on ties; a NaN at 0 is replaced by any number.
    if (x[i] > best_value || (std::isnan(best_value) && !std::isnan(x[i]))) {
      best = i;
      best_value = x[i];
    }
  }
  return best;
}

void softmax(float* x, int n) {
  float max_value = -INFINITY;
  for (int i = 0; i < n; ++i) max_value = std::max(max_value, x[i]);
  float sum = 0.f;
  for (int i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max_value);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (int i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace specrun::cpu
