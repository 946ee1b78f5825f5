#include "analysis/host_load.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

namespace specrun {
namespace {

double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

// Mean of one field over every (batch, rank) snapshot that has it.
double host_mean(const ModeData& d, int field) {
  double s = 0;
  int n = 0;
  for (std::size_t i = static_cast<std::size_t>(field); i < d.host.size(); i += kNumHostFields) {
    if (std::isnan(d.host[i])) continue;
    s += d.host[i];
    ++n;
  }
  return n > 0 ? s / n : 0;
}

// "name (pid) 97%" entries of the batches' busy lists ("rank R: a; b | rank S: c"), counted.
std::vector<std::string> frequent_busy(const std::vector<std::string>& lists, std::size_t limit) {
  std::map<std::string, int> count;
  for (const std::string& batch : lists) {
    std::size_t at = 0;
    while (at < batch.size()) {
      std::size_t end = batch.find_first_of(";|", at);
      if (end == std::string::npos) end = batch.size();
      std::string item = batch.substr(at, end - at);
      if (const auto colon = item.find("rank "); colon != std::string::npos)
        item = item.substr(item.find(':', colon) + 1);
      item.erase(0, item.find_first_not_of(' '));
      item.erase(item.find_last_not_of(' ') + 1);
      // Shares vary from batch to batch: count the process, keep its first share.
      const std::string key = item.substr(0, item.rfind(' '));
      if (!item.empty()) count.emplace(key, 0).first->second++;
      at = end + 1;
    }
  }
  std::vector<std::pair<int, std::string>> order;
  for (const auto& [name, n] : count) order.emplace_back(-n, name);
  std::sort(order.begin(), order.end());
  std::vector<std::string> out;
  for (std::size_t i = 0; i < order.size() && i < limit; ++i) out.push_back(order[i].second);
  return out;
}

std::string fixed(double x, int digits) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(digits) << x;
  return out.str();
}

}  // namespace

HostLoad summarize_host(const ModeData& data) {
  HostLoad h;
  const std::vector<double> wait = cpu_per_step(data, kCpuRunQueueWait);
  h.recorded = !wait.empty() || !data.host.empty();
  if (!h.recorded) return h;
  h.wait_ms = mean_of(wait);
  h.busy = host_mean(data, kHostBusyProcesses);
  h.load1 = host_mean(data, kHostLoad1);
  h.steal_pct = host_mean(data, kHostSteal);
  h.busy_names = frequent_busy(data.host_busy, 3);
  int snapshots = 0, slowed = 0;
  for (std::size_t i = 0; i + kNumHostFields <= data.host.size(); i += kNumHostFields) {
    if (std::isnan(data.host[i + kGpuSmMhz])) continue;
    ++snapshots;
    const double slowdown = data.host[i + kGpuSlowdown];
    if (!std::isnan(slowdown) && slowdown != 0) ++slowed;
    const double ecc = data.host[i + kGpuEccUncorrected], xid = data.host[i + kGpuXid];
    if (!std::isnan(ecc)) h.gpu_ecc = std::max(h.gpu_ecc, ecc);
    if (!std::isnan(xid)) h.gpu_xid += xid;
  }
  h.gpu = snapshots > 0;
  if (h.gpu) {
    h.gpu_sm_mhz = host_mean(data, kGpuSmMhz);
    h.gpu_mem_mhz = host_mean(data, kGpuMemMhz);
    h.gpu_temp_c = host_mean(data, kGpuTempC);
    h.gpu_power_w = host_mean(data, kGpuPowerW);
    h.gpu_slowdown_share = static_cast<double>(slowed) / snapshots;
  }
  return h;
}

namespace {

std::string format_gpu(const HostLoad& h) {
  return "GPU sm " + fixed(h.gpu_sm_mhz, 0) + " MHz, mem " + fixed(h.gpu_mem_mhz, 0) + " MHz, " +
         fixed(h.gpu_temp_c, 0) + " C, " + fixed(h.gpu_power_w, 0) + " W, slowed down in " +
         fixed(100 * h.gpu_slowdown_share, 0) + "% of batches, ECC uncorrected " +
         fixed(h.gpu_ecc, 0) + ", XID " + fixed(h.gpu_xid, 0);
}

}  // namespace

std::string format_hosts(const std::vector<ModeData>& modes) {
  std::string out;
  for (const ModeData& m : modes) {
    const HostLoad h = summarize_host(m);
    if (!h.recorded) continue;
    out += "host (" + m.mode + "): run-queue wait " + fixed(h.wait_ms, 2) +
           " ms/step, busy processes " + fixed(h.busy, 1) + ", load " + fixed(h.load1, 2) +
           ", steal " + fixed(h.steal_pct, 1) + "%";
    for (std::size_t i = 0; i < h.busy_names.size(); ++i)
      out += (i ? ", " : "; busy: ") + h.busy_names[i];
    if (h.gpu) out += "; " + format_gpu(h);
    out += "\n";
  }
  return out;
}

nlohmann::json gpu_to_json(const HostLoad& h) {
  return {{"sm_mhz", h.gpu_sm_mhz},
          {"mem_mhz", h.gpu_mem_mhz},
          {"temp_c", h.gpu_temp_c},
          {"power_w", h.gpu_power_w},
          {"slowdown_share", h.gpu_slowdown_share},
          {"ecc_uncorrected", h.gpu_ecc},
          {"xid", h.gpu_xid}};
}

nlohmann::json hosts_to_json(const std::vector<ModeData>& modes) {
  nlohmann::json out = nlohmann::json::object();
  for (const ModeData& m : modes) {
    const HostLoad h = summarize_host(m);
    if (!h.recorded) continue;
    out[m.mode] = {{"run_queue_wait_ms", h.wait_ms},
                   {"busy_processes", h.busy},
                   {"load1", h.load1},
                   {"steal_pct", h.steal_pct},
                   {"busy_names", h.busy_names}};
    if (h.gpu) out[m.mode]["gpu"] = gpu_to_json(h);
  }
  return out;
}

std::string HostChange::describe() const {
  std::string out = "run-queue wait " + fixed(base.wait_ms, 1) + " -> " + fixed(next.wait_ms, 1) +
                    " ms/step, busy processes " + fixed(base.busy, 1) + " -> " +
                    fixed(next.busy, 1);
  const HostLoad& busier = base_busier ? base : next;
  if (!busier.busy_names.empty()) {
    out += " (" + std::string(base_busier ? "BASE" : "NEW") + ": ";
    for (std::size_t i = 0; i < busier.busy_names.size(); ++i)
      out += (i ? ", " : "") + busier.busy_names[i];
    out += ")";
  }
  if (std::fabs(next.steal_pct - base.steal_pct) >= 1)
    out += ", steal " + fixed(base.steal_pct, 1) + "% -> " + fixed(next.steal_pct, 1) + "%";
  if (gpu_slower)
    out += ", GPU sm clock " + fixed(base.gpu_sm_mhz, 0) + " -> " + fixed(next.gpu_sm_mhz, 0) +
           " MHz, slowed down in " + fixed(100 * base.gpu_slowdown_share, 0) + "% -> " +
           fixed(100 * next.gpu_slowdown_share, 0) + "% of batches, XID " + fixed(base.gpu_xid, 0) +
           " -> " + fixed(next.gpu_xid, 0);
  return out;
}

HostChange compare_host(const std::string& mode, const ModeData& base, const ModeData& next,
                        double threshold_pct, double min_abs_ms, int resamples,
                        std::uint64_t seed) {
  HostChange c;
  c.mode = mode;
  c.base = summarize_host(base);
  c.next = summarize_host(next);
  if (!c.base.recorded || !c.next.recorded) return c;
  const std::vector<double> bw = cpu_per_step(base, kCpuRunQueueWait),
                            nw = cpu_per_step(next, kCpuRunQueueWait);
  const double t = threshold_pct / 100.0;
  bool wait_up = false, wait_down = false;
  if (!bw.empty() && !nw.empty()) {
    const std::vector<double> bones(bw.size(), 1.0), nones(nw.size(), 1.0);
    c.wait_relative = bootstrap_relative_change(bw, bones, nw, nones, resamples, seed);
    const double d = c.next.wait_ms - c.base.wait_ms;
    wait_up = (c.base.wait_ms == 0 ? d > 0 : c.wait_relative.low > t) && d > min_abs_ms;
    wait_down =
        (c.next.wait_ms == 0 ? d < 0 : c.wait_relative.high < -t / (1 + t)) && -d > min_abs_ms;
  }
  // The GPU: one run's ran slower (lower SM clock, slowdown reasons, XID errors).
  bool gpu_next = false, gpu_base = false;
  if (c.base.gpu && c.next.gpu && c.base.gpu_sm_mhz > 0 && c.next.gpu_sm_mhz > 0) {
    const double ratio = c.next.gpu_sm_mhz / c.base.gpu_sm_mhz;
    gpu_next = ratio < 1 / (1 + t) ||
               c.next.gpu_slowdown_share >= c.base.gpu_slowdown_share + 0.25 ||
               c.next.gpu_xid > c.base.gpu_xid;
    gpu_base = !gpu_next &&
               (ratio > 1 + t || c.base.gpu_slowdown_share >= c.next.gpu_slowdown_share + 0.25 ||
                c.base.gpu_xid > c.next.gpu_xid);
    c.gpu_slower = gpu_next || gpu_base;
    if (gpu_next) c.gpu_clock_ratio = std::min(1.0, ratio);
    if (gpu_base) c.gpu_clock_ratio = std::min(1.0, 1 / ratio);
  }
  const bool cpu_next =
      wait_up || c.next.busy >= c.base.busy + 0.5 || c.next.steal_pct >= c.base.steal_pct + 5;
  const bool cpu_base =
      wait_down || c.base.busy >= c.next.busy + 0.5 || c.base.steal_pct >= c.next.steal_pct + 5;
  c.next_busier = cpu_next || gpu_next;
  c.base_busier = !c.next_busier && (cpu_base || gpu_base);
  c.cpu_busier = c.next_busier ? cpu_next : c.base_busier && cpu_base;
  return c;
}

bool gpu_explains_change(double relative, double gpu_clock_ratio, double threshold_pct) {
  if (gpu_clock_ratio >= 1 || gpu_clock_ratio <= 0) return false;
  return std::fabs(relative) <= 1 / gpu_clock_ratio - 1 + threshold_pct / 100.0;
}

bool host_explains_phase(const ModeData& base, const ModeData& next, int phase,
                         const ModeData* ref_base, const ModeData* ref_next, int ref_phase,
                         double threshold_pct, double min_abs_ms) {
  const std::vector<double> bc = cpu_per_step(base, phase), nc = cpu_per_step(next, phase);
  const std::vector<double> bw = phase_per_step(base, phase), nw = phase_per_step(next, phase);
  if (bc.empty() || nc.empty() || bw.empty() || nw.empty()) return false;
  const double t = threshold_pct / 100.0;
  const double d_wall = mean_of(nw) - mean_of(bw);
  const double d_cpu = mean_of(nc) - mean_of(bc);
  if (std::fabs(d_cpu) < 0.4 * std::fabs(d_wall)) return true;
  if (std::fabs(d_cpu) <= std::max(min_abs_ms, t * mean_of(bw))) return true;
  if (ref_base == nullptr || ref_next == nullptr) return false;
  const std::vector<double> rb = cpu_per_step(*ref_base, ref_phase),
                            rn = cpu_per_step(*ref_next, ref_phase);
  const double cpu_base = mean_of(bc), ref_cpu_base = mean_of(rb);
  if (rb.empty() || rn.empty() || cpu_base <= 0 || ref_cpu_base <= 0) return false;
  const double growth = d_cpu / cpu_base;  // this phase's CPU, relative
  const double ref_growth = (mean_of(rn) - ref_cpu_base) / ref_cpu_base;  // the reference's
  // Same direction as the change being judged; a reference moving the other way counts as 0.
  const double sign = d_cpu >= 0 ? 1.0 : -1.0;
  return sign * growth <= 3.0 * std::max(0.0, sign * ref_growth) + t;
}

}  // namespace specrun
