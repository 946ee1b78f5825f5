#include "engine/batch_codec.h"

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace specrun {

std::string encode_batch(const BatchResult& r, bool with_records) {
  nlohmann::json j;
  j["batch"] = r.batch;
  j["n_steps"] = r.n_steps;
  j["n_ranks"] = r.n_ranks;
  j["timings_ms"] = r.timings_ms;
  if (with_records) {
    j["app"] = r.accepted_per_position;
    nlohmann::json seqs = nlohmann::json::array();
    for (const SequenceRecord& s : r.sequences) {
      seqs.push_back({s.prompt_index, s.prompt_id, s.category, s.prompt_len, s.generated,
                      s.verify_steps, s.drafted, s.accepted, s.finish_reason, s.wall_s,
                      s.output_tokens});
    }
    j["seqs"] = std::move(seqs);
    nlohmann::json steps = nlohmann::json::array();
    for (const StepRecord& st : r.steps)
      steps.push_back({st.batch, st.step, st.prompt_index, st.active, st.drafted, st.accepted,
                       st.depth, st.bonus, st.emitted});
    j["steps"] = std::move(steps);
  }
  std::vector<std::uint8_t> cbor = nlohmann::json::to_cbor(j);
  return std::string(cbor.begin(), cbor.end());
}

BatchResult decode_batch(const std::string& bytes) {
  nlohmann::json j = nlohmann::json::from_cbor(bytes);
  BatchResult r;
  r.batch = j.at("batch");
  r.n_steps = j.at("n_steps");
  r.n_ranks = j.at("n_ranks");
  r.timings_ms = j.at("timings_ms").get<std::vector<float>>();
  if (j.contains("seqs")) {
    r.accepted_per_position = j.at("app").get<std::vector<std::int64_t>>();
    for (const auto& s : j.at("seqs")) {
      SequenceRecord q;
      q.prompt_index = s[0];
      q.prompt_id = s[1];
      q.category = s[2];
      q.prompt_len = s[3];
      q.generated = s[4];
      q.verify_steps = s[5];
      q.drafted = s[6];
      q.accepted = s[7];
      q.finish_reason = s[8].get<std::int8_t>();
      q.wall_s = s[9];
      q.output_tokens = s[10].get<std::vector<std::int32_t>>();
      r.sequences.push_back(std::move(q));
    }
    for (const auto& s : j.at("steps"))
      r.steps.push_back(
          StepRecord{s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7].get<std::int8_t>(), s[8]});
  }
  return r;
}

BatchResult merge_group(const std::vector<BatchResult>& by_tp_rank) {
  SPEC_CHECK(!by_tp_rank.empty(), "no results to merge");
  BatchResult out = by_tp_rank[0];
  const int tp = static_cast<int>(by_tp_rank.size());
  for (int r = 1; r < tp; ++r)
    SPEC_CHECK(by_tp_rank[r].n_steps == out.n_steps,
               "tp rank " << r << " ran " << by_tp_rank[r].n_steps << " steps in batch "
                          << out.batch << " but tp rank 0 ran " << out.n_steps
                          << ": the ranks of a tp group diverged");
  out.n_ranks = tp;
  out.timings_ms.assign(static_cast<std::size_t>(out.n_steps) * tp * kNumPhases, 0.0f);
  for (int r = 0; r < tp; ++r) {
    const auto& src = by_tp_rank[r].timings_ms;
    SPEC_CHECK(src.size() == static_cast<std::size_t>(out.n_steps) * kNumPhases,
               "tp rank " << r << " sent " << src.size() << " timing values for " << out.n_steps
                          << " steps");
    for (int s = 0; s < out.n_steps; ++s)
      for (int p = 0; p < kNumPhases; ++p)
        out.timings_ms[(static_cast<std::size_t>(s) * tp + r) * kNumPhases + p] =
            src[static_cast<std::size_t>(s) * kNumPhases + p];
  }
  return out;
}

}  // namespace specrun
