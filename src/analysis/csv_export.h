// `specrun report RESULT.h5 --csv DIR`: the run's tables as CSV files for spreadsheets and
// tools that do not read HDF5, with the column names of the Python package (python/specrun):
//   summary.csv              one row per mode: counts, seconds, tokens/s, tau, alpha, and the
//                            paired speedup with its bootstrap 95% interval (speculative row)
//   <mode>_sequences.csv     one row per prompt (the file's /<mode>/sequences, no tokens)
//   <mode>_steps.csv         one row per sequence and verify step (/<mode>/steps)
//   <mode>_timings.csv       the phase timings in long form: row, batch, rank, one column per
//                            phase (ms; empty for a rank outside the row's batch)
//   <mode>_acceptance.csv    per depth: offered, reached, prior, unconditional, conditional
// Doubles are written with 17 significant digits, the float32 timings with 9 (both round-trip).
#pragma once

#include <string>
#include <vector>

#include "analysis/summary.h"

namespace specrun {

// Writes the files into `dir` (created when missing); each one is checked first (an existing
// file only with `overwrite`, never one of `inputs`), then written atomically. Returns the paths.
std::vector<std::string> write_csv_tables(const std::vector<ModeData>& modes,
                                          const RunSummary& summary, const std::string& dir,
                                          bool overwrite, const std::vector<std::string>& inputs);

// One CSV field: quoted (with doubled quotes) when it holds a comma, a quote or a line break.
std::string csv_field(const std::string& text);

}  // namespace specrun
