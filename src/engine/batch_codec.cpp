#include "engine/batch_codec.h"

#include <limits>
#include <nlohmann/json.hpp>

#include "common/error.h"

namespace specrun {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Per-rank tables of n_rows x width values, interleaved into [n_rows x ranks x width]. A rank
// that sent none (an older peer, or a part it could not measure) gets NaN rows.
std::vector<float> interleave(const std::vector<const std::vector<float>*>& by_rank, int n_rows,
                              int width, const char* what, std::int64_t batch) {
  const std::size_t ranks = by_rank.size(), rows = static_cast<std::size_t>(n_rows);
  const std::size_t w = static_cast<std::size_t>(width);
  std::vector<float> out(rows * ranks * w, kNaN);
  for (std::size_t r = 0; r < ranks; ++r) {
    const std::vector<float>& src = *by_rank[r];
    if (src.empty()) continue;
    SPEC_CHECK(src.size() == rows * w, "tp rank " << r << " sent " << src.size() << " " << what
                                                  << " values for " << n_rows << " rows of batch "
                                                  << batch);
    for (std::size_t i = 0; i < rows; ++i)
      std::copy_n(src.begin() + static_cast<std::ptrdiff_t>(i * w), w,
                  out.begin() + static_cast<std::ptrdiff_t>((i * ranks + r) * w));
  }
  return out;
}

// [n_rows x group x width] placed at ranks [first, first + group) of [n_rows x world x width].
std::vector<float> widen(const std::vector<float>& group_rows, int n_rows, int group, int width,
                         int first, int world) {
  const std::size_t w = static_cast<std::size_t>(width);
  std::vector<float> out(static_cast<std::size_t>(n_rows) * world * w, kNaN);
  if (group_rows.empty()) return out;
  for (int i = 0; i < n_rows; ++i)
    for (int r = 0; r < group; ++r)
      std::copy_n(group_rows.begin() +
                      static_cast<std::ptrdiff_t>((static_cast<std::size_t>(i) * group + r) * w),
                  w,
                  out.begin() + static_cast<std::ptrdiff_t>(
                                    (static_cast<std::size_t>(i) * world + first + r) * w));
  return out;
}

// The expert accounting of one model (empty records: absent).
nlohmann::json experts_to_json(const ExpertRecords& r) {
  return nlohmann::json{{"top_k", r.top_k},
                        {"n_experts", r.n_experts},
                        {"ep", r.ep},
                        {"expert_bytes", r.expert_bytes},
                        {"layers", r.layers},
                        {"batch", r.batch},
                        {"step", r.step},
                        {"kind", r.kind},
                        {"sequences", r.sequences},
                        {"tokens", r.tokens},
                        {"kept_tokens", r.kept_tokens},
                        {"unique", r.unique},
                        {"pairs", r.pairs},
                        {"max_load", r.max_load},
                        {"kept_unique", r.kept_unique},
                        {"kept_pairs", r.kept_pairs},
                        {"rank_pairs", r.rank_pairs},
                        {"seq_prompt_index", r.seq_prompt_index},
                        {"seq_tokens", r.seq_tokens},
                        {"seq_kept_tokens", r.seq_kept_tokens},
                        {"seq_unique", r.seq_unique},
                        {"seq_kept_unique", r.seq_kept_unique}};
}

ExpertRecords experts_from_json(const nlohmann::json& j) {
  ExpertRecords r;
  j.at("top_k").get_to(r.top_k);
  j.at("n_experts").get_to(r.n_experts);
  j.at("ep").get_to(r.ep);
  j.at("expert_bytes").get_to(r.expert_bytes);
  j.at("layers").get_to(r.layers);
  j.at("batch").get_to(r.batch);
  j.at("step").get_to(r.step);
  j.at("kind").get_to(r.kind);
  j.at("sequences").get_to(r.sequences);
  j.at("tokens").get_to(r.tokens);
  j.at("kept_tokens").get_to(r.kept_tokens);
  j.at("unique").get_to(r.unique);
  j.at("pairs").get_to(r.pairs);
  j.at("max_load").get_to(r.max_load);
  j.at("kept_unique").get_to(r.kept_unique);
  j.at("kept_pairs").get_to(r.kept_pairs);
  j.at("rank_pairs").get_to(r.rank_pairs);
  j.at("seq_prompt_index").get_to(r.seq_prompt_index);
  j.at("seq_tokens").get_to(r.seq_tokens);
  j.at("seq_kept_tokens").get_to(r.seq_kept_tokens);
  j.at("seq_unique").get_to(r.seq_unique);
  j.at("seq_kept_unique").get_to(r.seq_kept_unique);
  return r;
}

}  // namespace

std::string encode_batch(const BatchResult& r, bool with_records) {
  nlohmann::json j;
  j["batch"] = r.batch;
  j["n_steps"] = r.n_steps;
  j["n_ranks"] = r.n_ranks;
  j["timings_ms"] = r.timings_ms;
  j["cpu_ms"] = r.cpu_ms;
  if (!r.device_ms.empty()) j["device_ms"] = r.device_ms;
  if (!r.device_passes.empty()) j["device_passes"] = r.device_passes;
  j["host"] = r.host;
  j["host_busy"] = r.host_busy;
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
    if (!r.target_experts.empty()) j["target_experts"] = experts_to_json(r.target_experts);
    if (!r.draft_experts.empty()) j["draft_experts"] = experts_to_json(r.draft_experts);
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
  // NaN does not survive JSON/CBOR as a number in every path: null reads back as NaN.
  auto floats = [&](const char* key) {
    std::vector<float> v;
    if (!j.contains(key)) return v;
    for (const auto& x : j.at(key)) v.push_back(x.is_number() ? x.get<float>() : kNaN);
    return v;
  };
  r.cpu_ms = floats("cpu_ms");
  r.device_ms = floats("device_ms");
  r.device_passes = floats("device_passes");
  r.host = floats("host");
  if (j.contains("host_busy")) r.host_busy = j.at("host_busy").get<std::vector<std::string>>();
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
    if (j.contains("target_experts")) r.target_experts = experts_from_json(j.at("target_experts"));
    if (j.contains("draft_experts")) r.draft_experts = experts_from_json(j.at("draft_experts"));
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
  std::vector<const std::vector<float>*> timings, cpu, device, passes, host;
  bool any_device = false;
  for (const BatchResult& r : by_tp_rank) {
    SPEC_CHECK(!r.timings_ms.empty() || out.n_steps == 0,
               "a tp rank sent no timings for batch " << out.batch);
    timings.push_back(&r.timings_ms);
    cpu.push_back(&r.cpu_ms);
    device.push_back(&r.device_ms);
    passes.push_back(&r.device_passes);
    any_device = any_device || !r.device_ms.empty();
    host.push_back(&r.host);
  }
  out.timings_ms = interleave(timings, out.n_steps, kNumPhases, "timing", out.batch);
  out.cpu_ms = interleave(cpu, out.n_steps, kNumCpuColumns, "CPU", out.batch);
  out.device_ms = any_device
                      ? interleave(device, out.n_steps, kNumDeviceColumns, "device", out.batch)
                      : std::vector<float>{};
  out.device_passes =
      any_device ? interleave(passes, out.n_steps, kNumPassColumns, "device pass", out.batch)
                 : std::vector<float>{};
  out.host = interleave(host, 1, kNumHostFields, "host", out.batch);
  out.host_busy.clear();
  for (const BatchResult& r : by_tp_rank)
    out.host_busy.push_back(r.host_busy.empty() ? std::string() : r.host_busy[0]);
  return out;
}

BatchResult place_group(BatchResult group, int first_rank, int world_size) {
  const int tp = group.n_ranks;
  group.timings_ms = widen(group.timings_ms, group.n_steps, tp, kNumPhases, first_rank, world_size);
  group.cpu_ms = widen(group.cpu_ms, group.n_steps, tp, kNumCpuColumns, first_rank, world_size);
  if (!group.device_ms.empty())
    group.device_ms =
        widen(group.device_ms, group.n_steps, tp, kNumDeviceColumns, first_rank, world_size);
  if (!group.device_passes.empty())
    group.device_passes =
        widen(group.device_passes, group.n_steps, tp, kNumPassColumns, first_rank, world_size);
  group.host = widen(group.host, 1, tp, kNumHostFields, first_rank, world_size);
  std::vector<std::string> busy(static_cast<std::size_t>(world_size));
  for (int r = 0; r < tp && r < static_cast<int>(group.host_busy.size()); ++r)
    busy[static_cast<std::size_t>(first_rank + r)] = group.host_busy[static_cast<std::size_t>(r)];
  group.host_busy = std::move(busy);
  group.n_ranks = world_size;
  return group;
}

}  // namespace specrun
