// Step graphs: the launches of one forward step recorded, then issued as one CUDA graph.
//
// A decode or verify step of one shape issues the same few hundred launches every time, with the
// same arguments: only the contents of its inputs change (tokens, positions and cache slots,
// copied from one pinned host buffer by the step's first launch). Issued one by one, each costs
// the host a few microseconds and the device a gap; the story specrun exists for is a verify
// step that ran that way. StepGraphs records a step's launches (the function and its arguments,
// nothing run yet); at the end of the step it looks the exact list up among the graphs it made:
//   - found: the step is one cudaGraphLaunch (a replay);
//   - the same list was seen once before: captured into a graph (stream capture of the same
//     launches), instantiated, launched, kept;
//   - otherwise (first sight, a list that allocated device memory while recording, graphs off):
//     the recorded launches run as they are.
// At most max_graphs are kept: a capture beyond them destroys the least recently used one (a
// shape a job no longer runs, or one whose buffers have since grown), so a long job keeps
// graphs for the shapes it runs now.
// A capture that fails runs the step's launches one by one instead, and the object captures
// nothing more (StepGraphStats::capture_failures); in a step with collectives of several ranks
// (end()'s `agree`) it ends the job, as the other ranks' captured collectives wait for this one's.
// Identical function and argument lists mean identical launches, so a replay is exactly the step
// it stands for, and the outputs are bitwise those of the launches run one by one.
//
// A step may hold NCCL collectives (a tensor-parallel pass): the ranks of the group then agree
// on each step's choice (end()'s `agree`, step_graph_choice.h), and launch functions may attach
// host work to every launch of the graph being captured (on_launch: NcclComm times its
// collectives that way). NCCL will not destroy or abort a communicator while a graph holds its
// collectives: it calls drop_all() first.
//
// Arguments must be pointers, integers, enums or floating-point values (the list compares them
// by value; a pointer's target is read when the launch runs, as it would be without a graph).
// While recording, buffers freed by a (re)allocation are kept until the step is issued
// (DeferFrees, device_buffer.h). Nothing may synchronise the stream or read results between
// begin() and end(). One StepGraphs per model on one stream; not thread-safe.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/step_graph_choice.h"

namespace specrun::cuda {

// Counts over every StepGraphs of a rank (CudaContext owns one).
struct StepGraphStats {
  long long steps = 0;       // steps recorded (graphable steps)
  long long replays = 0;     // steps issued as a kept graph
  long long captures = 0;    // graphs made
  long long eager = 0;       // graphable steps whose launches ran one by one
  long long unrecorded = 0;  // steps not recorded (too large, or graphs off): launched one by one
  double capture_ms = 0;     // host time spent capturing and instantiating
  long long evicted = 0;     // graphs destroyed to make room (least recently used)
  // Captures that failed (a launch the driver refuses inside a capture, or a graph it will not
  // instantiate) in a step without collectives of several ranks: the step ran one by one
  // (counted in eager) and its StepGraphs captures nothing more. The first failure's message.
  long long capture_failures = 0;
  std::string capture_error;
};

// cudaMemcpyAsync / cudaMemcpy2DAsync as launches (checked), for StepGraphs::launch.
void memcpy_async(cudaStream_t stream, void* dst, const void* src, std::size_t bytes,
                  cudaMemcpyKind kind);
void memcpy2d_async(cudaStream_t stream, void* dst, std::size_t dst_pitch, const void* src,
                    std::size_t src_pitch, std::size_t width, std::size_t height,
                    cudaMemcpyKind kind);

namespace detail {
template <class T, class = void>
struct HasFields : std::false_type {};
template <class T>
struct HasFields<T, std::void_t<decltype(std::declval<const T&>().fields())>> : std::true_type {};
}  // namespace detail

class StepGraphs {
 public:
  static constexpr int kMaxGraphs = 256;  // per model: shapes x batch sizes in practice

  // stats: where the counts go (must outlive this object); max_graphs: how many are kept.
  explicit StepGraphs(StepGraphStats& stats, int max_graphs = kMaxGraphs);
  ~StepGraphs();
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;

  // A step starts. record = false: launches run as they come (a prefill through cuBLAS, a model
  // whose collectives are not launches of this object, graphs turned off).
  void begin(bool record);
  bool recording() const { return recording_; }

  // fn(args...) now, or recorded for end() while recording. The arguments convert to fn's
  // parameter types here.
  template <class... P, class... A>
  void launch(void (*fn)(P...), A&&... args) {
    using Args = std::tuple<std::decay_t<P>...>;
    Args t(std::forward<A>(args)...);
    if (!recording_) {
      std::apply(fn, t);
      return;
    }
    put(reinterpret_cast<std::uintptr_t>(fn));
    std::apply([this](const auto&... v) { (put(v), ...); }, t);
    ops_.emplace_back([fn, t] { std::apply(fn, t); });
  }

  // The group's choice for a step from this rank's (an MPI reduction over the tensor-parallel
  // group returning agreed_step_choice of every rank's; step_graph_choice.h).
  using Agree = std::function<std::int64_t(std::int64_t)>;

  // Issues the recorded step on `stream` (see the header comment). No-op when not recording.
  // agree: given when the step's launches hold collectives of several ranks; every rank of the
  // group then calls end() for the same steps in the same order.
  void end(cudaStream_t stream, const Agree& agree = {});
  // Graphs kept now.
  int graphs() const { return n_graphs_; }
  // Destroys the graphs kept (later steps record and capture anew).
  void drop();

  // The StepGraphs capturing a step on this thread right now (its launches are running inside
  // stream capture), or nullptr; and that capture's number among all of this thread's (0: none).
  static StepGraphs* capturing();
  static std::uint64_t capture_id();
  // Called from a launch function while capturing(): `hook` runs on the host right before every
  // launch of the graph being captured (the first, right after the capture, included).
  void on_launch(std::function<void()> hook);
  // drop() on every StepGraphs of the process.
  static void drop_all();

 private:
  struct Graph {
    std::vector<std::uint64_t> signature;
    cudaGraphExec_t exec = nullptr;
    std::int64_t serial = 0;     // which capture of this object made it
    std::uint64_t last_use = 0;  // uses_ at its last capture or replay
    // on_launch's, run before every launch; shared so a replay holds them without copying
    std::shared_ptr<const std::vector<std::function<void()>>> hooks;
  };

  template <class T>
  void put(const T& v) {
    if constexpr (std::is_pointer_v<T>) {
      signature_.push_back(reinterpret_cast<std::uintptr_t>(v));
    } else if constexpr (std::is_enum_v<T>) {
      signature_.push_back(static_cast<std::uint64_t>(static_cast<std::underlying_type_t<T>>(v)));
    } else if constexpr (std::is_integral_v<T>) {
      signature_.push_back(static_cast<std::uint64_t>(v));
    } else if constexpr (std::is_floating_point_v<T>) {
      std::uint64_t bits = 0;
      std::memcpy(&bits, &v, sizeof(T));
      signature_.push_back(bits);
    } else if constexpr (detail::HasFields<T>::value) {  // a struct of those (e.g.
                                                         // cuda::AttentionSplit)
      std::apply([this](const auto&... f) { (put(f), ...); }, v.fields());
    } else {
      static_assert(std::is_pointer_v<T>,
                    "step-graph launch arguments: pointers, numbers, enums, or structs of them "
                    "with fields()");
    }
  }
  void run_recorded();
  // Captures the recorded launches into g (exec and hooks). A failure throws when !fall_back;
  // otherwise it is counted and false returned, g untouched and the stream out of capture.
  bool capture(cudaStream_t stream, Graph& g, bool fall_back);
  void launch_graph(const Graph& g, cudaStream_t stream);
  // The kept graph with this step's signature, or nullptr.
  Graph* find(std::uint64_t hash);
  // Destroys the least recently used kept graph.
  void evict();

  StepGraphStats* stats_;
  bool recording_ = false;
  std::uint64_t epoch_at_begin_ = 0;
  std::unique_ptr<DeferFrees> defer_;
  std::vector<std::uint64_t> signature_;
  std::vector<std::function<void()>> ops_;
  std::unordered_map<std::uint64_t, std::vector<Graph>> graphs_;  // by signature hash
  std::unordered_map<std::uint64_t, int> seen_;                   // signature hash -> times
  int n_graphs_ = 0;
  int max_graphs_;
  std::uint64_t uses_ = 0;       // captures and replays so far (Graph::last_use)
  std::int64_t n_captures_ = 0;  // captures made (the serial of the next)
  bool capture_failed_ = false;  // a capture failed: none is tried again
  std::vector<std::function<void()>> capture_hooks_;
};

}  // namespace specrun::cuda
