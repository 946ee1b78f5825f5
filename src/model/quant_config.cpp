#include "model/quant_config.h"

#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "common/error.h"

namespace specrun {

struct CompiledPattern {
  std::regex re;
};

namespace {

using json = nlohmann::json;

// Reads one object of quantization_config, naming its keys by their path.
struct Node {
  const json& j;
  std::string path;  // "quantization_config" or "quantization_config.config_groups.group_0"
  const std::string& src;

  std::string key(const std::string& k) const { return path + "." + k; }
  bool has(const char* k) const { return j.contains(k) && !j[k].is_null(); }
  std::string value(const char* k) const { return j[k].dump(); }

  // Absent, null or an empty object, else refused: `why` says what it would change.
  void refuse_if_set(const char* k, const char* why) const {
    SPEC_INPUT_CHECK(
        !has(k) || (j[k].is_object() && j[k].empty()),
        src << ": \"" << key(k) << "\" = " << value(k) << " is not supported: " << why);
  }
  std::string string(const char* k, bool required, const std::string& fallback = "") const {
    if (!has(k)) {
      SPEC_INPUT_CHECK(!required, src << ": \"" << key(k) << "\" is missing");
      return fallback;
    }
    SPEC_INPUT_CHECK(j[k].is_string(),
                     src << ": \"" << key(k) << "\" must be a string, got " << value(k));
    return j[k].get<std::string>();
  }
  int integer(const char* k, bool required, int fallback) const {
    if (!has(k)) {
      SPEC_INPUT_CHECK(!required, src << ": \"" << key(k) << "\" is missing");
      return fallback;
    }
    SPEC_INPUT_CHECK(j[k].is_number_integer() && j[k].get<std::int64_t>() >= -1 &&
                         j[k].get<std::int64_t>() <= (1 << 24),
                     src << ": \"" << key(k) << "\" must be an integer, got " << value(k));
    return j[k].get<int>();
  }
  bool boolean(const char* k, bool fallback) const {
    if (!has(k)) return fallback;
    SPEC_INPUT_CHECK(j[k].is_boolean(),
                     src << ": \"" << key(k) << "\" must be true or false, got " << value(k));
    return j[k].get<bool>();
  }
  std::vector<std::string> strings(const char* k) const {
    std::vector<std::string> out;
    if (!has(k)) return out;
    SPEC_INPUT_CHECK(j[k].is_array(),
                     src << ": \"" << key(k) << "\" must be a list of strings, got " << value(k));
    for (std::size_t i = 0; i < j[k].size(); ++i) {
      SPEC_INPUT_CHECK(j[k][i].is_string(), src << ": \"" << key(k) << "[" << i
                                                << "]\" must be a string, got " << j[k][i].dump());
      out.push_back(j[k][i].get<std::string>());
    }
    return out;
  }
  Node child(const char* k) const {
    SPEC_INPUT_CHECK(j[k].is_object(),
                     src << ": \"" << key(k) << "\" must be an object, got " << value(k));
    return Node{j[k], key(k), src};
  }
};

// Python-only regular-expression syntax std::regex (ECMAScript) would read differently or not
// at all: refused rather than matched differently from the engines that wrote the config.
constexpr const char* kPythonOnlySyntax[] = {"(?P<", "(?P=", "(?<=", "(?<!", "(?i", "(?s",
                                             "(?m",  "(?x",  "(?a",  "(?u",  "\\A", "\\Z"};

QuantTarget make_target(const std::string& text, const std::string& where, const std::string& src) {
  QuantTarget t;
  t.text = text;
  if (text.rfind("re:", 0) == 0) {
    const std::string p = text.substr(3);
    for (const char* bad : kPythonOnlySyntax)
      SPEC_INPUT_CHECK(p.find(bad) == std::string::npos, src << ": \"" << where << "\" = \"" << text
                                                             << "\" uses Python-only "
                                                             << "regular-expression syntax (" << bad
                                                             << "), which specrun does not read");
    try {
      t.pattern = std::make_shared<const CompiledPattern>(
          CompiledPattern{std::regex(p, std::regex::ECMAScript)});
    } catch (const std::regex_error& e) {
      SPEC_INPUT_FAIL(src << ": \"" << where << "\" = \"" << text
                          << "\" is not a valid regular expression: " << e.what());
    }
    t.kind = QuantTarget::Kind::kPattern;
    return t;
  }
  // A class name (compressed-tensors matches a module's class too): "Linear" only. Module names
  // are dotted paths in lower case ("lm_head", "model.layers.0.mlp.down_proj").
  const bool class_name =
      !text.empty() && text.find('.') == std::string::npos && text[0] >= 'A' && text[0] <= 'Z';
  if (class_name) {
    SPEC_INPUT_CHECK(text == "Linear", src << ": \"" << where << "\" = \"" << text
                                           << "\": the only module class specrun matches is "
                                              "\"Linear\"");
    t.kind = QuantTarget::Kind::kClass;
  }
  return t;
}

std::vector<QuantTarget> make_targets(const Node& n, const char* k) {
  std::vector<QuantTarget> out;
  const std::vector<std::string> texts = n.strings(k);
  for (std::size_t i = 0; i < texts.size(); ++i)
    out.push_back(make_target(texts[i], n.key(k) + "[" + std::to_string(i) + "]", n.src));
  return out;
}

QuantGroup parse_group(const Node& g, const std::string& name) {
  QuantGroup out;
  out.name = name;
  if (g.has("format"))
    SPEC_INPUT_CHECK(g.string("format", true) == "pack-quantized",
                     g.src << ": \"" << g.key("format") << "\" = " << g.value("format")
                           << " is not supported (pack-quantized only)");
  out.targets = make_targets(g, "targets");
  SPEC_INPUT_CHECK(!out.targets.empty(), g.src << ": \"" << g.key("targets") << "\" is empty");
  g.refuse_if_set("input_activations",
                  "activation quantization (specrun reads weight-only schemes)");
  g.refuse_if_set("output_activations",
                  "activation quantization (specrun reads weight-only schemes)");
  SPEC_INPUT_CHECK(g.has("weights"), g.src << ": \"" << g.key("weights") << "\" is missing");
  const Node w = g.child("weights");
  const std::string type = w.string("type", true);
  SPEC_INPUT_CHECK(type == "int", g.src << ": \"" << w.key("type") << "\" = \"" << type
                                        << "\" is not supported (int only)");
  out.bits = w.integer("num_bits", true, 0);
  SPEC_INPUT_CHECK(out.bits == 4 || out.bits == 8, g.src << ": \"" << w.key("num_bits")
                                                         << "\" = " << out.bits
                                                         << " is not supported (4 or 8)");
  const std::string strategy = w.string("strategy", true);
  SPEC_INPUT_CHECK(strategy == "group" || strategy == "channel",
                   g.src << ": \"" << w.key("strategy") << "\" = \"" << strategy
                         << "\" is not supported (group or channel)");
  out.channel = strategy == "channel";
  const int group_size = w.integer("group_size", false, -1);
  if (out.channel) {
    SPEC_INPUT_CHECK(group_size == -1, g.src << ": \"" << w.key("group_size")
                                             << "\" = " << group_size << " with strategy channel");
  } else {
    SPEC_INPUT_CHECK(group_size > 0 && group_size % 8 == 0,
                     g.src << ": \"" << w.key("group_size") << "\" = " << group_size
                           << " is not supported (a positive multiple of 8 with strategy group)");
    out.group_size = group_size;
  }
  out.symmetric = w.boolean("symmetric", true);
  SPEC_INPUT_CHECK(!w.boolean("dynamic", false), g.src << ": \"" << w.key("dynamic")
                                                       << "\" = true is not supported (weights "
                                                       << "quantized at run time)");
  if (w.has("actorder")) {
    const std::string a = w.j["actorder"].is_string() ? w.j["actorder"].get<std::string>() : "";
    SPEC_INPUT_CHECK(a == "weight" || a == "static",
                     g.src << ": \"" << w.key("actorder") << "\" = " << w.value("actorder")
                           << " is not supported (it stores weight_g_idx, a column order specrun "
                           << "does not apply; \"weight\" and \"static\" keep the layout)");
  }
  w.refuse_if_set("block_structure", "block-structured weights");
  return out;
}

void parse_compressed_tensors(const Node& q, QuantConfig& c) {
  c.method = QuantMethod::kCompressedTensors;
  const std::string format = q.string("format", true);
  SPEC_INPUT_CHECK(format == "pack-quantized" || format == "mixed-precision",
                   q.src << ": \"" << q.key("format") << "\" = \"" << format
                         << "\" is not supported (pack-quantized, or mixed-precision whose "
                         << "groups are pack-quantized)");
  const std::string status = q.string("quantization_status", false, "compressed");
  SPEC_INPUT_CHECK(status == "compressed", q.src << ": \"" << q.key("quantization_status")
                                                 << "\" = \"" << status
                                                 << "\": only compressed checkpoints are read");
  q.refuse_if_set("kv_cache_scheme", "a quantized KV cache");
  q.refuse_if_set("sparsity_config", "sparse weights");
  q.refuse_if_set("transform_config", "transformed weights (rotations change the numbers)");
  SPEC_INPUT_CHECK(q.has("config_groups"),
                   q.src << ": \"" << q.key("config_groups") << "\" is missing");
  const Node groups = q.child("config_groups");
  SPEC_INPUT_CHECK(!groups.j.empty(), q.src << ": \"" << groups.path << "\" is empty");
  for (auto it = groups.j.begin(); it != groups.j.end(); ++it) {
    const Node g{it.value(), groups.key(it.key()), q.src};
    SPEC_INPUT_CHECK(it.value().is_object(), q.src << ": \"" << g.path
                                                   << "\" must be an object, got "
                                                   << it.value().dump());
    if (format == "mixed-precision")
      SPEC_INPUT_CHECK(g.has("format"), q.src << ": \"" << g.key("format")
                                              << "\" is missing (format mixed-precision)");
    c.groups.push_back(parse_group(g, it.key()));
  }
  c.ignore = make_targets(q, "ignore");
}

void parse_fp8(const Node& q, QuantConfig& c) {
  c.method = QuantMethod::kFp8Block;
  const std::string fmt = q.string("fmt", false, "e4m3");
  SPEC_INPUT_CHECK(fmt == "e4m3", q.src << ": \"" << q.key("fmt") << "\" = \"" << fmt
                                        << "\" is not supported (e4m3 only)");
  SPEC_INPUT_CHECK(q.has("weight_block_size"),
                   q.src << ": \"" << q.key("weight_block_size")
                         << "\" is missing: per-tensor FP8 scales are not supported (block-scaled "
                         << "weights only)");
  const json& b = q.j["weight_block_size"];
  SPEC_INPUT_CHECK(b.is_array() && b.size() == 2 && b[0].is_number_integer() &&
                       b[1].is_number_integer() && b[0].get<std::int64_t>() > 0 &&
                       b[0].get<std::int64_t>() <= 4096 && b[1].get<std::int64_t>() > 0 &&
                       b[1].get<std::int64_t>() <= 4096 && b[1].get<std::int64_t>() % 8 == 0,
                   q.src << ": \"" << q.key("weight_block_size") << "\" = " << b.dump()
                         << " must be [rows, cols], positive, cols a multiple of 8");
  c.block_rows = b[0].get<int>();
  c.block_cols = b[1].get<int>();
  const std::string act = q.string("activation_scheme", false, "dynamic");
  SPEC_INPUT_CHECK(act == "dynamic",
                   q.src << ": \"" << q.key("activation_scheme") << "\" = \"" << act
                         << "\" is not supported (dynamic only: specrun keeps activations in "
                         << "float32 and reads no input_scale tensors)");
  for (const char* k : {"modules_to_not_convert", "ignored_layers"})
    for (const std::string& m : q.strings(k)) c.not_convert.push_back(m);
  c.scale_fmt = q.string("scale_fmt", false);
}

}  // namespace

bool QuantTarget::matches(const std::string& module, ModuleClass cls) const {
  switch (kind) {
    case Kind::kClass:
      return cls == ModuleClass::kLinear;
    case Kind::kPattern:
      return std::regex_search(module, pattern->re, std::regex_constants::match_continuous);
    case Kind::kName:
      break;
  }
  return module == text;
}

QuantConfig QuantConfig::parse(const nlohmann::json& q, const std::string& source) {
  QuantConfig c;
  c.source = source;
  const Node n{q, "quantization_config", source};
  SPEC_INPUT_CHECK(q.is_object(),
                   source << ": \"quantization_config\" must be an object, got " << q.dump());
  const std::string method = n.string("quant_method", true);
  if (method == "compressed-tensors") {
    parse_compressed_tensors(n, c);
  } else if (method == "fp8") {
    parse_fp8(n, c);
  } else {
    SPEC_INPUT_FAIL(source << ": \"quantization_config.quant_method\" = \"" << method
                           << "\" is not supported (compressed-tensors pack-quantized, or fp8 "
                           << "block-scaled); running it as float weights would be wrong");
  }
  return c;
}

QuantDecision QuantConfig::decide(const std::string& module, ModuleClass cls) const {
  QuantDecision d;
  if (method == QuantMethod::kFp8Block) {
    if (cls != ModuleClass::kLinear) {
      d.why = "not a Linear module (fp8 quantizes Linear weights only)";
      return d;
    }
    for (std::size_t i = 0; i < not_convert.size(); ++i)
      if (module.find(not_convert[i]) != std::string::npos) {
        d.why = "quantization_config.modules_to_not_convert / ignored_layers \"" + not_convert[i] +
                "\"";
        return d;
      }
    d.kind = QuantKind::kFp8E4M3;
    d.why = "quantization_config.weight_block_size [" + std::to_string(block_rows) + ", " +
            std::to_string(block_cols) + "]";
    return d;
  }
  if (method != QuantMethod::kCompressedTensors) return d;
  for (std::size_t i = 0; i < ignore.size(); ++i)
    if (ignore[i].matches(module, cls)) {
      d.why = "quantization_config.ignore[" + std::to_string(i) + "] \"" + ignore[i].text + "\"";
      return d;
    }
  for (const QuantGroup& g : groups)
    for (std::size_t i = 0; i < g.targets.size(); ++i) {
      if (!g.targets[i].matches(module, cls)) continue;
      const std::string why = "quantization_config.config_groups." + g.name + ".targets[" +
                              std::to_string(i) + "] \"" + g.targets[i].text + "\"";
      SPEC_INPUT_CHECK(d.group == nullptr || d.group == &g,
                       source << ": module " << module << " is claimed by " << d.why << " and by "
                              << why << " (two schemes for one module)");
      if (d.group == nullptr) {
        d.group = &g;
        d.kind = g.bits == 4 ? QuantKind::kInt4 : QuantKind::kInt8;
        d.why = why;
      }
    }
  if (d.group == nullptr) d.why = "no quantization_config.config_groups target matches it";
  return d;
}

std::string QuantConfig::describe() const {
  std::ostringstream out;
  switch (method) {
    case QuantMethod::kNone:
      return "none";
    case QuantMethod::kCompressedTensors:
      out << "compressed-tensors pack-quantized:";
      for (const QuantGroup& g : groups) {
        out << " " << g.name << " int" << g.bits << " ";
        if (g.channel)
          out << "per channel";
        else
          out << "group " << g.group_size;
        out << (g.symmetric ? " symmetric" : " with zero points") << ";";
      }
      out << " " << ignore.size() << " ignore entries";
      break;
    case QuantMethod::kFp8Block:
      out << "fp8 e4m3 blocks " << block_rows << "x" << block_cols << "; " << not_convert.size()
          << " modules not converted";
      break;
  }
  return out.str();
}

const char* quant_kind_name(QuantKind kind) {
  switch (kind) {
    case QuantKind::kNone:
      return "none";
    case QuantKind::kInt4:
      return "int4";
    case QuantKind::kInt8:
      return "int8";
    case QuantKind::kFp8E4M3:
      return "fp8-e4m3";
  }
  return "?";
}

}  // namespace specrun
