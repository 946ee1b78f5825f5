// Result files with expert records (the MoE accounting): round trip, uncommitted rows on
// reopen, inconsistent records refused, older schemas read without experts.

#include <gtest/gtest.h>
#include <hdf5.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <regex>
#include <thread>

#include "analysis/summary.h"
#include "common/error.h"
#include "engine/expert_accounting.h"
#include "io/h5.h"
#include "io/result_file.h"
#include "result_file_fixtures.h"
#include "temp_dir.h"

using namespace specrun;
using namespace specrun::result_test;
namespace fs = std::filesystem;

namespace {

// The expert records of a batch made by make_batch: the prefill (step -1, every sequence's
// prompt) and one pass per step, routed by a formula; `experts` experts in `layers` MoE layers
// (ids 1, 3, ...), top-2 over 2 EP ranks. The draft model (draft = true) has 4 experts, top-1.
ExpertRecords make_experts(const BatchResult& b, bool draft) {
  ExpertRecords rec;
  ExpertRouting r;
  r.top_k = draft ? 1 : 2;
  r.n_experts = draft ? 4 : 8;
  r.ep = draft ? 1 : 2;
  r.expert_bytes = draft ? 300 : 4096;
  r.layers = draft ? std::vector<int>{0} : std::vector<int>{1, 3};
  PassExpertCounts counts;
  std::vector<std::int64_t> prompts;
  for (const SequenceRecord& s : b.sequences) prompts.push_back(s.prompt_index);
  for (int32_t step = -1; step < b.n_steps; ++step) {
    std::vector<int> per_seq;
    std::vector<std::uint8_t> kept;
    for (const SequenceRecord& s : b.sequences) {
      const int n = step < 0 ? s.prompt_len : 1 + (draft ? 0 : kDraftLen);
      per_seq.push_back(n);
      for (int i = 0; i < n; ++i) kept.push_back(step < 0 || i <= (step + 1) % 3 ? 1 : 0);
    }
    r.n_tokens = 0;
    for (int n : per_seq) r.n_tokens += n;
    r.experts.clear();
    for (std::size_t l = 0; l < r.layers.size(); ++l)
      for (int t = 0; t < r.n_tokens; ++t)
        for (int j = 0; j < r.top_k; ++j)
          r.experts.push_back(static_cast<int>(
              (b.batch * 3 + t * 5 + static_cast<int>(l) + j + std::max(step, 0)) % r.n_experts));
    count_experts(r, PassTokens{per_seq, kept}, counts);
    append_pass(rec, r, counts, b.batch, step,
                step < 0 ? (draft ? kPassDraftPrefill : kPassPrefill)
                         : (draft ? kPassPropose : kPassVerify),
                prompts);
  }
  return rec;
}

BatchResult make_expert_batch(int64_t b) {
  BatchResult r = make_batch(b, kDraftLen);
  r.target_experts = make_experts(r, false);
  r.draft_experts = make_experts(r, true);
  return r;
}

}  // namespace

// The expert accounting round trip: records in, the same records out (committed batches only),
// the file's tables as documented (h5py), dense modes without them.
TEST(ResultFile, ExpertRecordsRoundTrip) {
  TempDir dir;
  const std::string path = dir.file("moe.h5");
  ExpertRecords want_target, want_draft;
  {
    ResultWriter w = ResultWriter::create(path, make_header(), false);
    for (int64_t b : {0, 3, 4}) {
      const BatchResult batch = make_expert_batch(b);
      ASSERT_EQ(expert_records_problem(batch.target_experts), "");
      want_target.append(batch.target_experts);
      want_draft.append(batch.draft_experts);
      w.append_batch(kModeSpeculative, batch);
      w.append_batch(kModeBaseline, make_batch(b, 0));
    }
    w.finish();
  }
  ResultReader r(path);
  EXPECT_EQ(r.experts(kModeSpeculative, kExpertTarget), want_target);
  EXPECT_EQ(r.experts(kModeSpeculative, kExpertDraft), want_draft);
  EXPECT_TRUE(r.experts(kModeBaseline, kExpertTarget).empty());
  EXPECT_EQ(want_target.passes(), 3 + (2 + 0 % 3) + (2 + 3 % 3) + (2 + 4 % 3));
  // As a researcher reads it.
  const std::string py = R"PY(
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f:
    assert "experts" not in f["baseline"]
    nb = int(f["speculative"].attrs["batches_committed"])
    for model, k, E, L, ep in (("target", 2, 8, 2, 2), ("draft", 1, 4, 1, 1)):
        g = f["speculative/experts/" + model]
        assert int(g.attrs["top_k"]) == k and int(g.attrs["n_experts"]) == E, model
        assert int(g.attrs["ep"]) == ep, model
        assert list(g["layers"][:]) == ([1, 3] if model == "target" else [0]), model
        kinds = list(g.attrs["kinds"])
        assert kinds[:3] == ["prefill", "decode", "verify"], kinds
        P = int(g["commits/passes_end"][nb - 1])
        R = int(g["commits/rows_end"][nb - 1])
        p = {c: g["passes/" + c][:P] for c in g["passes"]}
        assert p["unique"].shape == (P, L) and p["rank_pairs"].shape == (P, L, ep)
        assert (p["bytes"] == p["unique"] * int(g.attrs["expert_bytes"])).all()
        assert (p["pairs"] == p["tokens"][:, None] * k).all()
        assert (p["rank_pairs"].sum(axis=2) == p["pairs"]).all()
        assert (p["unique"] <= np.minimum(E, p["pairs"])).all()
        assert (p["kept_unique"] <= p["unique"]).all()
        assert (p["kept_tokens"] <= p["tokens"]).all()
        s = {c: g["sequences/" + c][:R] for c in g["sequences"]}
        assert s["unique"].shape == (R, L) and p["sequences"].sum() == R
        assert np.array_equal(np.add.reduceat(s["tokens"], np.r_[0, np.cumsum(p["sequences"])[:-1]]),
                              p["tokens"])
        assert g["passes/unique"].attrs["description"], model
        assert set(kinds[i] for i in p["kind"]) == (
            {"prefill", "verify"} if model == "target" else {"draft_prefill", "propose"})
    # docs/file-formats.md's example: expert MB per emitted token of the step passes.
    mode = "speculative"
    g, e = f[mode], f[mode]["experts/target"]
    nb = min([int(g.attrs["batches_committed"])] + [len(d) for d in g["batches"].values()]
             + [len(d) for d in e["commits"].values()])
    P = int(e["commits/passes_end"][nb - 1]) if nb else 0
    kinds = list(e.attrs["kinds"])
    kind = np.array(kinds)[e["passes/kind"][:P]]
    unique, nbytes = e["passes/unique"][:P], e["passes/bytes"][:P]
    step = (kind == "decode") | (kind == "verify")
    ns = int(g["batches/steps_end"][nb - 1]) if nb else 0
    key = lambda b, s: (int(b), int(s))
    emitted = {}
    for b, s, n in zip(g["steps/batch"][:ns], g["steps/step"][:ns], g["steps/emitted"][:ns]):
        emitted[key(b, s)] = emitted.get(key(b, s), 0) + int(n)
    toks = sum(emitted[key(b, s)] for b, s in zip(e["passes/batch"][:P][step],
                                                 e["passes/step"][:P][step]))
    got = (unique[step].mean(), nbytes[step].sum() / 1e6 / toks)
    want = (float(sys.argv[2]), float(sys.argv[3]))
    assert abs(got[0] - want[0]) < 1e-9 and abs(got[1] - want[1]) < 1e-9, (got, want)
)PY";
  const std::string script = dir.file("check.py");
  std::ofstream(script) << py;
  const ExpertSummary summary = summarize_experts(want_target, r.steps(kModeSpeculative), 0);
  const ExpertPassSummary* verify = summary.kind("verify");
  ASSERT_NE(verify, nullptr);
  char figures[128];
  std::snprintf(figures, sizeof figures, " %.17g %.17g", verify->unique_per_layer,
                verify->mb_per_emitted_token);
  EXPECT_EQ(std::system(("/usr/bin/python3 " + script + " " + path + figures).c_str()), 0);
}

// A kill between an expert table's rows and the batch's commit: the reader reads up to the last
// commit, and --resume cuts the rows off before it continues.
TEST(ResultFile, UncommittedExpertRowsAreIgnoredAndTruncatedOnReopen) {
  TempDir dir;
  const std::string path = dir.file("moe.h5");
  ExpertRecords want;
  {
    ResultWriter w = ResultWriter::create(path, make_header(), false);
    for (int64_t b = 0; b < 2; ++b) {
      const BatchResult batch = make_expert_batch(b);
      want.append(batch.target_experts);
      w.append_batch(kModeSpeculative, batch);
    }
  }
  {
    h5::File f = h5::File::open(path, h5::File::Access::kReadWrite);
    h5::Group g = f.group("speculative/experts/target");
    g.group("passes").dataset("unique").append(std::vector<int32_t>{1, 1});
    g.group("passes").dataset("batch").append(std::vector<int64_t>{2});
    g.group("sequences").dataset("tokens").append(std::vector<int32_t>{4, 4});
    // A commit row of the expert table with no batch commit record after it.
    g.group("commits").dataset("passes_end").append(std::vector<int64_t>{1000});
    f.close();
  }
  {
    ResultReader r(path);
    EXPECT_EQ(r.experts(kModeSpeculative, kExpertTarget), want);
  }
  {
    ResultWriter w = ResultWriter::reopen(path);
    const BatchResult batch = make_expert_batch(2);
    want.append(batch.target_experts);
    w.append_batch(kModeSpeculative, batch);
    w.finish();
  }
  ResultReader r(path);
  EXPECT_EQ(r.experts(kModeSpeculative, kExpertTarget), want);
  EXPECT_EQ(r.committed_batches(kModeSpeculative), (std::vector<int64_t>{0, 1, 2}));
}

// A batch whose expert records break an identity, change shape or start late is refused before
// anything is written; a file whose stored counts break one is refused naming the group.
TEST(ResultFile, InconsistentExpertRecordsAreRefused) {
  TempDir dir;
  const std::string path = dir.file("moe.h5");
  {
    ResultWriter w = ResultWriter::create(path, make_header(), false);
    w.append_batch(kModeSpeculative, make_expert_batch(0));
    BatchResult bad = make_expert_batch(1);
    bad.target_experts.pairs[0] += 1;
    EXPECT_NE(error_of([&] { w.append_batch(kModeSpeculative, bad); }).find("pairs"),
              std::string::npos);
    bad = make_expert_batch(1);
    bad.target_experts.batch[0] = 7;
    EXPECT_THROW(w.append_batch(kModeSpeculative, bad), Error);
    bad = make_expert_batch(1);
    bad.draft_experts.expert_bytes = 1;
    EXPECT_NE(error_of([&] { w.append_batch(kModeSpeculative, bad); }).find("another shape"),
              std::string::npos);
    w.append_batch(kModeBaseline, make_batch(0, 0));
    bad = make_batch(1, 0);
    bad.target_experts = make_experts(bad, false);
    EXPECT_NE(error_of([&] { w.append_batch(kModeBaseline, bad); }).find("earlier batches"),
              std::string::npos);
    w.append_batch(kModeSpeculative, make_expert_batch(1));
    w.finish();
  }
  EXPECT_EQ(ResultReader(path).committed_batches(kModeSpeculative), (std::vector<int64_t>{0, 1}));
  {
    h5::File f = h5::File::open(path, h5::File::Access::kReadWrite);
    f.group("speculative/experts/target/passes")
        .dataset("bytes")
        .write(0, 1, std::vector<int64_t>{1, 1}.data());
    f.close();
  }
  const std::string msg =
      error_of([&] { ResultReader(path).experts(kModeSpeculative, kExpertTarget); });
  EXPECT_NE(msg.find("speculative/experts/target/passes/bytes row 0 is not unique x expert_bytes"),
            std::string::npos)
      << msg;
}

// A schema 6 file (as the previous specrun wrote it: no expert tables, no weight memory) reads
// with empty expert records; --resume refuses it by its version.
TEST(ResultFile, SchemaSixFilesReadWithoutExperts) {
  TempDir dir;
  const std::string path = dir.file("v6.h5");
  {
    ResultHeader h = make_header();
    h.target_weight_bytes.clear();
    ResultWriter w = ResultWriter::create(path, h, false);
    w.append_batch(kModeSpeculative, make_batch(0, kDraftLen));
    w.finish();
  }
  {
    h5::File f = h5::File::open(path, h5::File::Access::kReadWrite);
    f.set_attr_int32("schema_version", 6);
    f.close();
  }
  {
    ResultReader r(path);
    EXPECT_EQ(r.info().schema_version, 6);
    EXPECT_TRUE(r.experts(kModeSpeculative, kExpertTarget).empty());
    EXPECT_TRUE(r.info().header.target_weight_bytes.empty());
    expect_batches_match(r, kModeSpeculative, kDraftLen, {0});
  }
  const std::string msg = error_of([&] { ResultWriter::reopen(path); });
  EXPECT_NE(msg.find("has result schema version 6"), std::string::npos) << msg;
}
