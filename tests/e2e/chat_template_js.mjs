// Renders every conversation of CONVERSATIONS with each model's real chat template twice, with
// the JavaScript reference (@huggingface/jinja) and with `specrun chat-template --model DIR`, and
// requires the two texts to be equal byte for byte. The JavaScript side gets the variables
// transformers' apply_chat_template passes: messages, tools and documents (null unless the
// conversation has them), add_generation_prompt, the special tokens of tokenizer_config.json that
// are not null, and the conversation's other keys.
//
// usage: node chat_template_js.mjs --fixtures DIR --specrun BIN --conversations FILE
//          --workdir DIR --model NAME=MODEL_DIR [--model NAME=MODEL_DIR ...]
// Prints one line per template ("qwen3: 40/40 conversations equal"); on a difference, the conversation, both
// outputs and the first differing byte offset. Exits 1 when any render differs or fails.
//
// Where the reference is known to differ from transformers (Python's Jinja2), a conversation
// holds transformers' text in "transformers": {NAME: text} and the reason in "js_differs":
// specrun must give that text, and @huggingface/jinja must still differ from it (so that the
// note goes when the reference is fixed).
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

function parseArgs(argv) {
  const args = { models: [] };
  for (let i = 0; i < argv.length; i += 2) {
    const [key, value] = [argv[i], argv[i + 1]];
    if (value === undefined) throw new Error(`missing value after ${key}`);
    if (key === "--model") {
      const eq = value.indexOf("=");
      args.models.push({ name: value.slice(0, eq), dir: value.slice(eq + 1) });
    } else {
      args[key.replace(/^--/, "")] = value;
    }
  }
  for (const key of ["fixtures", "specrun", "conversations", "workdir"])
    if (!args[key]) throw new Error(`--${key} is required`);
  return args;
}

// tokenizer_config.json's template ("default" of a list) and its special tokens.
function loadModel(dir) {
  const config = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
  let template = config.chat_template;
  if (Array.isArray(template)) template = template.find((t) => t.name === "default").template;
  if (typeof template !== "string") throw new Error(`${dir}: no chat_template`);
  const token = (t) => (t && typeof t === "object" ? t.content : t);
  return { template, bos: token(config.bos_token), eos: token(config.eos_token) };
}

function firstDifference(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; ++i) if (a[i] !== b[i]) return i;
  return a.length === b.length ? -1 : n;
}

const args = parseArgs(process.argv.slice(2));
const jinjaEntry = path.join(args.fixtures, "node_modules/@huggingface/jinja/dist/index.js");
const { Template } = await import(pathToFileURL(jinjaEntry).href);
const conversations = JSON.parse(fs.readFileSync(args.conversations, "utf8"));

let failures = 0;
for (const model of args.models) {
  const { template, bos, eos } = loadModel(model.dir);
  const reference = new Template(template);
  let equal = 0;
  let toTransformers = 0;
  conversations.forEach((conversation, index) => {
    const { name, messages, add_generation_prompt, transformers, js_differs, ...extra } =
      conversation;
    const context = { messages, tools: null, documents: null, add_generation_prompt };
    if (bos != null) context.bos_token = bos;
    if (eos != null) context.eos_token = eos;
    Object.assign(context, extra);
    const js = Buffer.from(reference.render(context), "utf8");
    const known = transformers?.[model.name];
    const expected = known === undefined ? js : Buffer.from(known, "utf8");
    const expectedName = known === undefined ? "@huggingface/jinja" : "transformers";

    const input = path.join(args.workdir, `${model.name}-${index}.json`);
    fs.writeFileSync(input, JSON.stringify({ messages, add_generation_prompt, ...extra }));
    const run = spawnSync(args.specrun, ["chat-template", "--model", model.dir, input], {
      maxBuffer: 64 << 20,
    });
    const report = (what) => {
      ++failures;
      console.log(`FAIL ${model.name} / ${name}: ${what}`);
      console.log(`  conversation: ${JSON.stringify(conversation)}`);
    };
    if (run.status !== 0) {
      report(`specrun exited ${run.status}: ${run.stderr.toString().trim()}`);
      return;
    }
    const offset = firstDifference(expected, run.stdout);
    if (offset < 0 && known !== undefined && firstDifference(js, expected) < 0) {
      report(`@huggingface/jinja now gives transformers' text: drop the "js_differs" note`);
      return;
    }
    if (offset < 0) {
      ++equal;
      if (known !== undefined) {
        ++toTransformers;
        console.log(`  ${model.name} / ${name}: transformers' text (${js_differs})`);
      }
      return;
    }
    report(`outputs differ at byte ${offset}`);
    console.log(`  ${expectedName}: ${JSON.stringify(expected.toString("utf8"))}`);
    console.log(`  specrun: ${JSON.stringify(run.stdout.toString("utf8"))}`);
    console.log(
      `  from byte ${offset}: ${JSON.stringify(expected.subarray(offset, offset + 40).toString())}` +
        ` vs ${JSON.stringify(run.stdout.subarray(offset, offset + 40).toString())}`,
    );
  });
  const note = toTransformers ? ` (${toTransformers} of them to transformers' text)` : "";
  console.log(`${model.name}: ${equal}/${conversations.length} conversations equal${note}`);
}
process.exit(failures === 0 ? 0 : 1);
