// Provenance without MPI: the mismatch check, rank-range formatting, environment selection,
// version decoding and the JSON round trip.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "io/provenance.h"

namespace specrun {
namespace {

// A record as rank `rank` of `size` would have it on a clean launch: same build and libraries
// everywhere; hostname, pid and Open MPI's per-rank variables differ.
ProvenanceRecord make_record(int rank, int size) {
  ProvenanceRecord r;
  r.specrun_version = "0.1.0";
  r.git_commit = "0123456789abcdef0123456789abcdef01234567";
  r.build_type = "Release";
  r.cxx_flags = "-O3 -DNDEBUG";
  r.compiler = "GNU 12.2.0";
  r.mpi_library = "Open MPI v4.1.4";
  r.hdf5_version = "1.10.8";
  r.hostname = rank < 4 ? "node01" : "node02";
  r.pid = 1000 + rank;
  r.world_rank = rank;
  r.world_size = size;
  r.local_rank = rank % 4;
  r.cpu_model = "Test CPU";
  r.environment = {{"NCCL_DEBUG", "WARN"},
                   {"OMP_NUM_THREADS", "4"},
                   {"OMPI_COMM_WORLD_RANK", std::to_string(rank)},
                   {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(rank % 4)},
                   {"OMPI_COMM_WORLD_NODE_RANK", std::to_string(rank % 4)},
                   {"OMPI_MCA_ess_base_vpid", std::to_string(rank)},
                   {"OMPI_MCA_orte_ess_node_rank", std::to_string(rank % 4)},
                   {"OMPI_FILE_LOCATION", "/tmp/ompi." + r.hostname + ".0/pid.1/0/0"},
                   {"SLURM_PROCID", std::to_string(rank)},
                   {"SLURM_LOCALID", std::to_string(rank % 4)},
                   {"SLURM_TASK_PID", std::to_string(r.pid)},
                   {"SLURM_NODEID", std::to_string(rank / 4)}};
  return r;
}

std::vector<ProvenanceRecord> make_world(int size) {
  std::vector<ProvenanceRecord> records;
  for (int r = 0; r < size; ++r) records.push_back(make_record(r, size));
  return records;
}

TEST(Provenance, IdenticalRecordsHaveNoMismatches) {
  EXPECT_TRUE(find_mismatches(make_world(8)).empty());
  EXPECT_TRUE(find_mismatches(make_world(1)).empty());
  EXPECT_TRUE(find_mismatches({}).empty());
}

TEST(Provenance, PerRankVariablesAndHostnamesAreNotMismatches) {
  // make_record already varies hostname, pid and the per-rank variables: none may be reported.
  auto records = make_world(8);
  records[5].environment["OMPI_COMMAND"] = "wrapper.sh";  // MPMD: a different program
  records[5].environment["OMPI_MCA_orte_app_num"] = "1";
  for (const Mismatch& m : find_mismatches(records)) ADD_FAILURE() << "reported " << describe(m);
  EXPECT_TRUE(is_per_process_variable("OMPI_COMM_WORLD_RANK"));
  EXPECT_TRUE(is_per_process_variable("SLURM_PROCID"));
  EXPECT_FALSE(is_per_process_variable("NCCL_PROTO"));
  EXPECT_FALSE(is_per_process_variable("CUDA_VISIBLE_DEVICES"));
}

TEST(Provenance, VariableDifferingOnASubsetNamesTheRanks) {
  auto records = make_world(8);
  for (int r : {0, 1, 2, 3, 6}) records[r].environment["NCCL_DEBUG"] = "INFO";
  auto mismatches = find_mismatches(records);
  ASSERT_EQ(mismatches.size(), 1u);
  const Mismatch& m = mismatches[0];
  EXPECT_EQ(m.name, "NCCL_DEBUG");
  EXPECT_TRUE(m.is_environment);
  ASSERT_EQ(m.values.size(), 2u);
  EXPECT_TRUE(m.values[0].set);
  EXPECT_EQ(m.values[0].value, "INFO");
  EXPECT_EQ(m.values[0].ranks, (std::vector<int>{0, 1, 2, 3, 6}));
  EXPECT_EQ(m.values[1].value, "WARN");
  EXPECT_EQ(m.values[1].ranks, (std::vector<int>{4, 5, 7}));
  EXPECT_EQ(describe(m), R"(NCCL_DEBUG differs: "INFO" on ranks 0-3,6; "WARN" on ranks 4-5,7)");
}

TEST(Provenance, VariableMissingOnSomeRanksIsUnset) {
  auto records = make_world(8);
  for (int r = 0; r < 4; ++r) records[r].environment["NCCL_PROTO"] = "LL";
  auto mismatches = find_mismatches(records);
  ASSERT_EQ(mismatches.size(), 1u);
  const Mismatch& m = mismatches[0];
  EXPECT_EQ(m.name, "NCCL_PROTO");
  ASSERT_EQ(m.values.size(), 2u);
  EXPECT_EQ(m.values[0].ranks, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_FALSE(m.values[1].set);
  EXPECT_EQ(m.values[1].ranks, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(describe(m), R"(NCCL_PROTO differs: "LL" on ranks 0-3; <unset> on ranks 4-7)");

  // Unset on the lowest rank: the <unset> group comes first, ordered by lowest rank.
  records = make_world(3);
  records[2].environment["UCX_TLS"] = "rc";
  mismatches = find_mismatches(records);
  ASSERT_EQ(mismatches.size(), 1u);
  EXPECT_EQ(describe(mismatches[0]), R"(UCX_TLS differs: <unset> on ranks 0-1; "rc" on rank 2)");
}

TEST(Provenance, EmptyValueDiffersFromUnset) {
  auto records = make_world(2);
  records[0].environment["CUDA_LAUNCH_BLOCKING"] = "";
  auto mismatches = find_mismatches(records);
  ASSERT_EQ(mismatches.size(), 1u);
  EXPECT_EQ(describe(mismatches[0]),
            R"(CUDA_LAUNCH_BLOCKING differs: "" on rank 0; <unset> on rank 1)");
}

TEST(Provenance, BuildAndVersionFieldsAreCompared) {
  auto records = make_world(4);
  records[3].git_commit = "fedcba9876543210fedcba9876543210fedcba98";
  records[3].git_dirty = true;
  records[1].hdf5_version = "1.12.2";
  records[2].environment["NCCL_ALGO"] = "Ring";
  auto mismatches = find_mismatches(records);
  ASSERT_EQ(mismatches.size(), 4u);
  // Record fields first, in declaration order, then environment variables.
  EXPECT_EQ(mismatches[0].name, "git_commit");
  EXPECT_FALSE(mismatches[0].is_environment);
  EXPECT_EQ(format_rank_ranges(mismatches[0].values[1].ranks), "3");
  EXPECT_EQ(describe(mismatches[1]),
            R"(git_dirty differs: "false" on ranks 0-2; "true" on rank 3)");
  EXPECT_EQ(describe(mismatches[2]),
            R"(hdf5_version differs: "1.10.8" on ranks 0,2-3; "1.12.2" on rank 1)");
  EXPECT_EQ(mismatches[3].name, "NCCL_ALGO");
  EXPECT_TRUE(mismatches[3].is_environment);
}

TEST(Provenance, ThreeDistinctValues) {
  auto records = make_world(6);
  records[1].environment["OMP_NUM_THREADS"] = "8";
  records[4].environment.erase("OMP_NUM_THREADS");
  auto mismatches = find_mismatches(records);
  ASSERT_EQ(mismatches.size(), 1u);
  EXPECT_EQ(describe(mismatches[0]),
            R"(OMP_NUM_THREADS differs: "4" on ranks 0,2-3,5; "8" on rank 1; <unset> on rank 4)");
}

TEST(Provenance, RankRanges) {
  EXPECT_EQ(format_rank_ranges({}), "");
  EXPECT_EQ(format_rank_ranges({5}), "5");
  EXPECT_EQ(format_rank_ranges({0, 1, 2, 3, 6}), "0-3,6");
  EXPECT_EQ(format_rank_ranges({9, 8, 0, 2, 1, 6, 3, 3}), "0-3,6,8-9");
  EXPECT_EQ(format_rank_ranges({1, 3, 5}), "1,3,5");
}

TEST(Provenance, SelectEnvironmentKeepsRecordedPrefixesOnly) {
  auto env = select_environment({"NCCL_PROTO=LL", "PATH=/usr/bin", "CUDA_VISIBLE_DEVICES=0,1",
                                 "OMPI_COMM_WORLD_RANK=3", "UCX_TLS=rc,sm", "SLURM_JOB_ID=42",
                                 "OMP_NUM_THREADS=4", "OMPX=1", "NCCL=2", "MY_NCCL_X=1",
                                 "NCCL_EMPTY=", "NCCL_EQ=a=b", "garbage"});
  std::map<std::string, std::string> expected = {{"NCCL_PROTO", "LL"},
                                                 {"CUDA_VISIBLE_DEVICES", "0,1"},
                                                 {"OMPI_COMM_WORLD_RANK", "3"},
                                                 {"UCX_TLS", "rc,sm"},
                                                 {"SLURM_JOB_ID", "42"},
                                                 {"OMP_NUM_THREADS", "4"},
                                                 {"NCCL_EMPTY", ""},
                                                 {"NCCL_EQ", "a=b"}};
  EXPECT_EQ(env, expected);
}

TEST(Provenance, VersionDecoding) {
  EXPECT_EQ(decode_nccl_version(2804), "2.8.4");
  EXPECT_EQ(decode_nccl_version(22803), "2.28.3");
  EXPECT_EQ(decode_nccl_version(21805), "2.18.5");
  EXPECT_EQ(decode_cuda_version(12040), "12.4");
  EXPECT_EQ(decode_cuda_version(13000), "13.0");
  EXPECT_EQ(decode_cuda_version(11080), "11.8");
}

TEST(Provenance, JsonRoundTrip) {
  ProvenanceRecord r = make_record(5, 8);
  r.git_dirty = true;
  r.cuda_build = true;
  r.cuda_runtime_version = "12.4";
  r.cuda_driver_version = "error: cudaErrorNoDevice: no CUDA-capable device is detected";
  r.nccl_version = "2.21.5";
  r.nccl_build_version = "2.21.5";
  r.nvidia_driver_version = "unavailable: cannot load libnvidia-ml.so.1";
  GpuDevice g;
  g.index = 0;
  g.name = "NVIDIA H200";
  g.uuid = "GPU-0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0";
  g.pci_bus_id = "0000:19:00.0";
  g.sm_clock_mhz = 1980;
  g.mem_clock_mhz = -1;
  g.clock_note = "unavailable: nvmlDeviceGetClockInfo(NVML_CLOCK_MEM) failed: Not Supported (3)";
  r.cuda_devices = {g};
  r.environment["NCCL_WEIRD"] = "quote \" backslash \\ newline \n tab \t";

  nlohmann::json j = r;
  EXPECT_EQ(j.at("world_rank"), 5);
  EXPECT_EQ(j.at("environment").at("NCCL_DEBUG"), "WARN");
  ProvenanceRecord back = nlohmann::json::parse(j.dump()).get<ProvenanceRecord>();
  // Compare through JSON and field by field for the ones most likely to be dropped.
  EXPECT_EQ(nlohmann::json(back), j);
  EXPECT_EQ(back.environment, r.environment);
  EXPECT_EQ(back.git_dirty, true);
  EXPECT_EQ(back.pid, r.pid);
  ASSERT_EQ(back.cuda_devices.size(), 1u);
  EXPECT_EQ(back.cuda_devices[0].uuid, g.uuid);
  EXPECT_EQ(back.cuda_devices[0].pci_bus_id, g.pci_bus_id);
  EXPECT_EQ(back.cuda_devices[0].sm_clock_mhz, 1980);
  EXPECT_EQ(back.cuda_devices[0].mem_clock_mhz, -1);
  EXPECT_EQ(back.cuda_devices[0].clock_note, g.clock_note);
  EXPECT_EQ(back.nvidia_driver_version, r.nvidia_driver_version);
  EXPECT_EQ(j.at("cuda_devices")[0].at("sm_clock_mhz"), 1980);
  EXPECT_EQ(back.cuda_driver_version, r.cuda_driver_version);

  nlohmann::json missing = j;
  missing.erase("git_commit");
  try {
    (void)missing.get<ProvenanceRecord>();
    FAIL() << "a record without git_commit was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("git_commit"), std::string::npos) << e.what();
  }
  nlohmann::json wrong = j;
  wrong["world_rank"] = "five";
  EXPECT_THROW((void)wrong.get<ProvenanceRecord>(), Error);
}

TEST(Provenance, GpuUuidFormatsLikeNvidiaSmi) {
  std::array<unsigned char, 16> bytes{};
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(i * 17);
  EXPECT_EQ(format_gpu_uuid(bytes), "GPU-00112233-4455-6677-8899-aabbccddeeff");
  bytes.fill(0);
  bytes[15] = 0x0a;
  EXPECT_EQ(format_gpu_uuid(bytes), "GPU-00000000-0000-0000-0000-00000000000a");
}

TEST(Provenance, GpuClocksAndIdentitiesAreNotMismatchesButDriverIs) {
  auto records = make_world(4);
  for (int r = 0; r < 4; ++r) {
    GpuDevice g;
    g.index = 0;
    g.name = "NVIDIA H200";
    g.uuid = "GPU-0000000" + std::to_string(r) + "-0000-0000-0000-000000000000";
    g.pci_bus_id = "0000:1" + std::to_string(r) + ":00.0";
    g.sm_clock_mhz = 1980 - 100 * r;  // boost or throttling: information, not a mismatch
    g.mem_clock_mhz = 3201;
    records[r].cuda_devices = {g};
    records[r].nvidia_driver_version = "550.54.15";
  }
  EXPECT_TRUE(find_mismatches(records).empty());
  records[2].nvidia_driver_version = "535.104.05";
  auto mismatches = find_mismatches(records);
  ASSERT_EQ(mismatches.size(), 1u);
  EXPECT_EQ(describe(mismatches[0]),
            R"(nvidia_driver_version differs: "550.54.15" on ranks 0-1,3; "535.104.05" on rank 2)");
}

TEST(Provenance, MismatchJsonRoundTrip) {
  auto records = make_world(8);
  for (int r = 0; r < 4; ++r) records[r].environment["NCCL_PROTO"] = "LL";
  auto mismatches = find_mismatches(records);
  nlohmann::json j = mismatches;
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0].at("name"), "NCCL_PROTO");
  EXPECT_EQ(j[0].at("values")[0].at("rank_ranges"), "0-3");
  EXPECT_EQ(j[0].at("values")[1].at("set"), false);
  EXPECT_EQ(j[0].at("description"), describe(mismatches[0]));
  auto back = j.get<std::vector<Mismatch>>();
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(describe(back[0]), describe(mismatches[0]));
  EXPECT_EQ(back[0].values[1].ranks, (std::vector<int>{4, 5, 6, 7}));
}

// Communication configuration files (io/comm_config.h): each library's parsing rules, its
// precedence (environment, then the earlier file), the files it would read, and the mismatch
// of a file that differs between nodes.
TEST(CommConfig, NcclParsesLikeNccl) {
  // '#' only at the start of a line, nothing trimmed, the first line for a name counts, lines
  // without '=' skipped.
  const auto e = parse_nccl_conf(
      "# comment\nNCCL_PROTO=LL\nNCCL_ALGO = Ring\nno equals sign\n  #NCCL_X=1\nNCCL_PROTO=Simple\n"
      "NCCL_DEBUG=\n");
  EXPECT_EQ(e.at("NCCL_PROTO"), "LL");
  EXPECT_EQ(e.at("NCCL_ALGO "), " Ring");
  EXPECT_EQ(e.at("  #NCCL_X"), "1");
  EXPECT_EQ(e.at("NCCL_DEBUG"), "");
  EXPECT_EQ(e.size(), 4u);
}

TEST(CommConfig, MpiParsesLikeOpenMpi) {
  const auto e = parse_mca_conf(
      "# Open MPI\n  btl = ^openib,ofi \n\npml=ob1\n   # indented comment\nbtl_tcp_eager_limit = "
      "1\n"
      "btl_tcp_eager_limit = 2\njunk line\n");
  EXPECT_EQ(e.at("btl"), "^openib,ofi");
  EXPECT_EQ(e.at("pml"), "ob1");
  EXPECT_EQ(e.at("btl_tcp_eager_limit"), "2");
  EXPECT_EQ(e.size(), 3u);
}

TEST(CommConfig, EnvironmentWinsThenTheEarlierFile) {
  CommConfigFile user{
      "/home/u/.nccl.conf", true, "xxh3:1", {{"NCCL_PROTO", "LL"}, {"NCCL_ALGO", "Tree"}}};
  CommConfigFile system{
      "/etc/nccl.conf", true, "xxh3:2", {{"NCCL_PROTO", "Simple"}, {"NCCL_IB_HCA", "mlx5"}}};
  CommConfig c = resolve_nccl_config({user, system}, {{"NCCL_ALGO", "Ring"}});
  EXPECT_EQ(c.library, "NCCL");
  EXPECT_EQ(c.params.at("NCCL_PROTO").value, "LL");
  EXPECT_EQ(c.params.at("NCCL_PROTO").source, "/home/u/.nccl.conf");
  EXPECT_EQ(c.params.at("NCCL_ALGO").value, "Ring");
  EXPECT_EQ(c.params.at("NCCL_ALGO").source, "environment");
  EXPECT_EQ(c.params.at("NCCL_IB_HCA").source, "/etc/nccl.conf");

  CommConfigFile mca{"/etc/openmpi/openmpi-mca-params.conf", true, "xxh3:3", {{"btl", "^openib"}}};
  CommConfig m = resolve_mca_config({mca}, {{"OMPI_MCA_btl", "self,tcp"}, {"btl", "no"}});
  EXPECT_EQ(m.params.at("btl").value, "self,tcp");
  EXPECT_EQ(m.params.at("btl").source, "environment");
}

TEST(CommConfig, TheFilesEachLibraryReads) {
  EXPECT_EQ(nccl_conf_paths({}, "/home/u"),
            (std::vector<std::string>{"/home/u/.nccl.conf", "/etc/nccl.conf"}));
  EXPECT_EQ(nccl_conf_paths({{"NCCL_CONF_FILE", "/opt/my.conf"}}, "/home/u"),
            (std::vector<std::string>{"/opt/my.conf", "/etc/nccl.conf"}));
  EXPECT_EQ(mca_param_file_paths({}, "/home/u", "/etc/openmpi"),
            (std::vector<std::string>{"/home/u/.openmpi/mca-params.conf",
                                      "/etc/openmpi/openmpi-mca-params.conf"}));
  EXPECT_EQ(
      mca_param_file_paths({{"OMPI_MCA_mca_base_param_files", "/a.conf,/b.conf"}}, "/h", "/e"),
      (std::vector<std::string>{"/a.conf", "/b.conf"}));
  // This process: Open MPI's file list is read without error; absent files are recorded.
  const CommConfig here = read_openmpi_config();
  EXPECT_EQ(here.library, "Open MPI");
  EXPECT_FALSE(here.files.empty());
  for (const CommConfigFile& f : here.files) EXPECT_EQ(f.present, !f.hash.empty()) << f.path;
}

TEST(CommConfig, AFileThatDiffersOnSomeRanksIsAMismatchAndRoundTrips) {
  std::vector<ProvenanceRecord> records;
  for (int r = 0; r < 4; ++r) {
    ProvenanceRecord rec = make_record(r, 4);
    CommConfigFile f{"/etc/nccl.conf", r < 2, r < 2 ? "xxh3:00000000000000aa" : "", {}};
    if (r < 2) f.entries["NCCL_PROTO"] = "LL";
    rec.cuda_build = true;
    rec.nccl_config = resolve_nccl_config({f}, {});
    records.push_back(rec);
  }
  const std::vector<Mismatch> m = find_mismatches(records);
  std::vector<std::string> text;
  for (const Mismatch& x : m) text.push_back(describe(x));
  ASSERT_EQ(text.size(), 2u) << ::testing::PrintToString(text);
  EXPECT_EQ(text[0],
            "NCCL config NCCL_PROTO differs: \"LL (/etc/nccl.conf)\" on ranks 0-1; <unset> on "
            "ranks 2-3");
  EXPECT_EQ(text[1],
            "NCCL config file /etc/nccl.conf differs: \"xxh3:00000000000000aa\" on ranks 0-1; "
            "\"absent\" on ranks 2-3");
  EXPECT_FALSE(m[0].is_environment);

  // The record's JSON carries the configuration and reads back; a record from before it was
  // recorded (no nccl_config / mpi_config keys) still reads.
  const nlohmann::json j = records[0];
  ASSERT_TRUE(j.contains("nccl_config"));
  EXPECT_FALSE(j.contains("mpi_config"));
  const ProvenanceRecord back = j.get<ProvenanceRecord>();
  EXPECT_EQ(nlohmann::json(back), j);
  EXPECT_EQ(back.nccl_config.params.at("NCCL_PROTO").source, "/etc/nccl.conf");
  nlohmann::json old = j;
  old.erase("nccl_config");
  EXPECT_TRUE(old.get<ProvenanceRecord>().nccl_config.library.empty());
  nlohmann::json bad = j;
  bad["nccl_config"].erase("files");
  try {
    (void)bad.get<ProvenanceRecord>();
    FAIL() << "a configuration without files was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("files"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace specrun
