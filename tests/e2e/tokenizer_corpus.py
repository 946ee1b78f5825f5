#!/usr/bin/python3
"""The corpus of tests/e2e/tokenizer_js.sh: strings that are hard for tokenizers, generated
deterministically (a fixed seed, the standard library only), plus whole Python standard library
files and line / paragraph chunks of others.

usage: tokenizer_corpus.py OUT_DIR
writes OUT_DIR/corpus.jsonl (every string, one JSON string a line) and OUT_DIR/stdlib.jsonl
(the whole standard library files only, for timing), and prints how many strings of each kind.

Code points are drawn from scripts and symbols assigned by Unicode 13 (utf8proc 2.6) so that
every implementation compared knows them: PCRE2 10.42 has Unicode 14, Node 20 has 15 or later.
"""
import json
import os
import random
import sys
import sysconfig
import unicodedata

SEED = 20240611
STDLIB = sysconfig.get_paths()["stdlib"]
# Whole files, in this order (about 1.3 MB together).
WHOLE_FILES = [
    "abc.py", "argparse.py", "ast.py", "base64.py", "bisect.py", "calendar.py",
    "contextlib.py", "copy.py", "csv.py", "dataclasses.py", "datetime.py", "difflib.py",
    "enum.py", "fnmatch.py", "fractions.py", "functools.py", "heapq.py", "inspect.py",
    "ipaddress.py", "operator.py", "pathlib.py", "pprint.py", "random.py", "shlex.py",
    "string.py", "textwrap.py", "tokenize.py", "typing.py", "uuid.py", "zipfile.py",
]
# Files cut into lines and paragraphs.
CHUNKED_FILES = ["os.py", "subprocess.py", "threading.py", "statistics.py", "gettext.py",
                 "locale.py", "codecs.py", "pickle.py", "socket.py", "tarfile.py"]

SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>",
           "<|end_header_id|>", "<|python_tag|>", "<|reserved_special_token_7|>",
           "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
           "</tool_call>", "<|fim_prefix|>", "<|vision_pad|>", "<s>", "</s>", "<unk>"]
NEAR_SPECIAL = ["<|eot_id", "<|im_start", "<s", "< s>", "<<s>>", "s>", "<|", "|>", "<think",
                "</s", "<|im_end|", "<|begin_of_text|"]

SPACES = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r", " \n", "\n ", " \t ",
          "\u00a0", "\u2002", "\u2003", "\u2009", "\u200a", "\u202f", "\u205f", "\u3000",
          "\u1680", "\u0085", "\u2028", "\u2029", "\u000b", "\u000c", "\ufeff", "\u180e",
          "\u200b", "\u200d", "\u00a0\u00a0", " \u00a0", "\u3000\u3000"]

WORDS = [
    # Latin and contractions, mixed case
    "hello", "World", "THE", "don't", "DON'T", "I'm", "I'M", "you're", "YOU'RE", "we've",
    "We'Ve", "she'll", "SHE'LL", "he'd", "He'D", "it's", "IT'S", "'s", "'S", "'t", "'re",
    "'ve", "'m", "'ll", "'d", "'ſ", "o'clock", "rock'n'roll", "l'été", "naïve", "café",
    "Straße", "ﬁnance", "ǅemal", "İstanbul", "ΣΊΣΥΦΟΣ", "ﬀ", "Ⅻ",
    # other scripts
    "Ελληνικά", "Привет", "мир", "Україна", "Ёжик", "Հայերեն", "ქართული", "עברית",
    "שָׁלוֹם", "العربية", "مَرْحَبًا", "فارسی", "اردو", "हिन्दी", "नमस्ते", "বাংলা", "ਪੰਜਾਬੀ",
    "தமிழ்", "తెలుగు", "ಕನ್ನಡ", "മലയാളം", "සිංහල", "ไทย", "สวัสดี", "ລາວ", "ཏིབེཏ", "မြန်မာ",
    "ខ្មែរ", "ᠮᠣᠩᠭᠣᠯ", "ትግርኛ", "ᏣᎳᎩ", "ᐃᓄᒃᑎᑐᑦ", "中文", "汉字", "漢字", "日本語", "ひらがな",
    "カタカナ", "ｶﾀｶﾅ", "한국어", "안녕하세요", "Tiếng Việt", "Türkçe", "Ōsaka", "Ångström",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𝓗𝓮𝓵𝓵𝓸", "ℌℑℜ", "𐌰𐌱𐌲", "𓀀𓀁", "𠜎𠜱", "𪚥",
    # numbers
    "0", "7", "42", "123", "1234", "12345", "123456", "1234567", "12345678", "1234567890",
    "3.14159", "-273.15", "1e10", "1,000,000", "0x1F", "0b1010", "١٢٣", "۴۵۶", "१२३", "１２３",
    "²³", "½", "¼", "⅞", "①②", "Ⅳ", "〇", "٣٫١٤",
    # emoji
    "😀", "👍", "👍🏽", "👍🏿", "👨‍👩‍👧‍👦", "👩🏽‍💻", "🏳️‍🌈", "🇺🇸", "🇯🇵🇫🇷", "1️⃣", "❤️",
    "☺︎", "✊🏾", "🧑‍🤝‍🧑", "🤷‍♀️", "🙇🏻‍♂️", "🐍", "🦀", "🎉🎉🎉",
    # punctuation and code
    "!", "?!", "...", "…", "—", "–", "-", "--", "---", "==", "!=", "<=", ">=", "->", "=>",
    "::", "&&", "||", "++", "/*", "*/", "//", "#", "##", "@", "$", "%", "^", "&", "*", "(",
    ")", "[", "]", "{", "}", "<", ">", "\\", "|", "~", "`", "```", "'", '"', "''", '""', ";",
    ":", ",", ".", "«", "»", "„", "“", "”", "‘", "’", "¿", "¡", "·", "•", "§", "¶", "©", "®",
    "™", "°", "±", "×", "÷", "€", "£", "¥", "₹", "₿", "%d", "{}", "[]", "()", "<>",
    "def", "return", "self.x", "__init__", "printf(\"%s\\n\", s);", "x = y + 1",
    "std::vector<int>", "#include <stdio.h>", "SELECT * FROM t;", "<div class=\"a\">",
    "https://example.com/a?b=c&d=e", "user@example.com", "C:\\Windows\\System32",
]

COMBINING = ["\u0300", "\u0301", "\u0302", "\u0303", "\u0308", "\u030a", "\u0323", "\u0327",
             "\u0328", "\u0331", "\u0345", "\u05b4", "\u064e", "\u0650", "\u093c", "\u0e31",
             "\u20d7", "\u3099", "\ufe0f", "\u200d"]

# Unicode 13 ranges to draw random code points from.
RANGES = [(0x20, 0x7E), (0xA0, 0x24F), (0x250, 0x2FF), (0x300, 0x36F), (0x370, 0x3FF),
          (0x400, 0x4FF), (0x531, 0x587), (0x591, 0x5F4), (0x600, 0x6FF), (0x900, 0x97F),
          (0x980, 0x9FB), (0xE01, 0xE5B), (0x10A0, 0x10FF), (0x1100, 0x11FF), (0x1E00, 0x1FFF),
          (0x2000, 0x206F), (0x2070, 0x209C), (0x20A0, 0x20BF), (0x2100, 0x218B),
          (0x2190, 0x23FF), (0x2460, 0x27BF), (0x2E80, 0x2FD5), (0x3000, 0x30FF),
          (0x3130, 0x318E), (0x4E00, 0x9FEF), (0xAC00, 0xD7A3), (0xFB00, 0xFB4F),
          (0xFE30, 0xFE4F), (0xFF01, 0xFFEE), (0x1D400, 0x1D7FF), (0x1F300, 0x1F5FF),
          (0x1F600, 0x1F64F), (0x1F900, 0x1F9FF), (0x20000, 0x2A6DD)]


def fixed_cases():
    """Hand-written corner cases."""
    cases = ["", " ", "  ", "\n", "\t", "\r\n", "a", "A", "é", "e\u0301", "e\u0301\u0302",
             "\u212b", "A\u030a", "\u2126", "\u1100\u1161\u11a8", "\u0071\u0307\u0323",
             "\u0071\u0323\u0307", "\u1e9b\u0323", "ﬁ", "\u00c5\u0301", "\u0958", "\ufb2c",
             "Hello world", "Hello  world", " Hello world ", "Hello\nworld\n", "hello\r\nworld",
             "a\tb\t\tc", "a \n\n b", "x\u00a0y", "x\u3000y", "x\u0085y", "x\ufeffy",
             "x\u180ey", "x\u200by", "end with space ", "end with newline\n", "\n\nleading",
             "   leading spaces", "trailing spaces   ", " " * 100, "\n" * 50, "\t" * 20,
             " \n" * 30, "a" * 1000, "ab" * 700, "😀" * 200, "中" * 500, "1" * 200,
             "1234567890" * 30, "!" * 300, "." * 100, "-" * 80, "=" * 80, "#" * 50,
             "don't DON'T Don'T dOn'T", "I'M I'm i'M i'm", "'S's'sS", "''s", "'s'", "x's'",
             "'ſ", "'ſt", "Fuß's", "it'S", "WE'LL'VE", "y'all", "'", "''", "'''",
             "He said 'hello' and 'goodbye'.", "\"quoted\"", "‘curly’ “quotes”",
             "12 123 1234 12345 123456", "3.14 and 2.71", "v1.2.3", "2024-06-11T12:00:00Z",
             "$1,234.56", "-1", "+1", "1+1=2", "x²+y²=z²", "١٢٣٤٥", "１２３４５",
             "<s>", "</s>", "<unk>", "<s><s>", "<s> </s>", " <s> ", "a<s>b", "<s>hello",
             "hello</s>", "<|begin_of_text|>", "<|begin_of_text|>Hello", "Hello<|eot_id|>",
             "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>",
             "<|start_header_id|>assistant<|end_header_id|>\n\n",
             "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n",
             "<|im_start|>assistant\n<think>\n\n</think>\n\nHello!<|im_end|>",
             "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
             "<|endoftext|><|endoftext|>", "<|eot_id", "<|eot_id|", "<|im_start",
             "<<|eot_id|>>", "<|<|eot_id|>|>", "< s>", "<s >", "<S>", "<|EOT_ID|>",
             "<|reserved_special_token_0|><|reserved_special_token_250|>",
             "text <|fim_prefix|>code<|fim_suffix|>more<|fim_middle|>",
             "👨‍👩‍👧‍👦👨‍👩‍👧‍👦", "👍🏻👍🏼👍🏽👍🏾👍🏿", "🇺🇸🇬🇧🇯🇵", "🏳️‍🌈 pride",
             "emoji😀inside", "a\u200db", "\u200d", "\ufe0f", "\u0301", "\u0301a",
             "مرحبا بالعالم", "שלום עולם", "Hello مرحبا שלום mixed", "हिन्दी भाषा", "ภาษาไทย",
             "日本語のテキスト。", "中文，标点！", "한국어 텍스트", "Tiếng Việt có dấu",
             "각", "안녕", "\u1100\u1161", "Ελληνικά κείμενο", "Русский текст",
             "def f(x):\n    return x + 1\n", "if (a && b) { return c; }\n",
             "for i in range(10):\n\tprint(i)\n", "    indented\n        more\n",
             "x = {'a': 1, \"b\": [1, 2, 3]}", "#!/usr/bin/env python3\n# -*- coding: utf-8 -*-\n",
             "SELECT id, name FROM users WHERE age > 21;", "<html><body><p>Hi</p></body></html>",
             "https://www.example.com/path/to/page?query=1&x=y#frag", "C:\\Users\\me\\file.txt",
             "a_b_c", "CamelCaseWord", "snake_case_word", "kebab-case-word", "ALLCAPS",
             "x" * 5000, "\u00e9" * 2000, "a b " * 500]
    return cases


def random_char(rng):
    """A code point of RANGES that is assigned (not Cn in this Python's Unicode 14 tables)."""
    while True:
        c = chr(rng.randint(*rng.choice(RANGES)))
        if unicodedata.category(c) != "Cn":
            return c


def random_word(rng):
    pick = rng.random()
    if pick < 0.55:
        return rng.choice(WORDS)
    if pick < 0.75:
        return "".join(random_char(rng) for _ in range(rng.randint(1, 8)))
    if pick < 0.85:
        base = rng.choice(WORDS)
        return base + "".join(rng.choice(COMBINING) for _ in range(rng.randint(1, 3)))
    if pick < 0.93:
        return str(rng.randint(0, 10 ** rng.randint(1, 25)))
    if pick < 0.97:
        return rng.choice(NEAR_SPECIAL)
    return rng.choice(SPECIAL)


def random_text(rng):
    parts = []
    for _ in range(rng.randint(1, 40)):
        parts.append(random_word(rng))
        if rng.random() < 0.8:
            parts.append(" " if rng.random() < 0.7 else rng.choice(SPACES))
    text = "".join(parts)
    if rng.random() < 0.15:
        text = rng.choice(SPACES) + text
    return text


def random_code_points(rng):
    return "".join(random_char(rng) for _ in range(rng.randint(1, 60)))


def read(name):
    with open(os.path.join(STDLIB, name), encoding="utf-8") as f:
        return f.read()


def stdlib_chunks(rng):
    """Lines, runs of lines and paragraphs of CHUNKED_FILES."""
    chunks = []
    for name in CHUNKED_FILES:
        text = read(name)
        lines = text.splitlines(keepends=True)
        chunks += [line for line in lines[:400:3] if line.strip()]
        for _ in range(25):
            start = rng.randrange(len(lines))
            chunks.append("".join(lines[start:start + rng.randint(2, 30)]))
        chunks += [p for p in text.split("\n\n")[:60] if p.strip()]
    return chunks


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out_dir = sys.argv[1]
    rng = random.Random(SEED)
    kinds = {
        "fixed": fixed_cases(),
        "random_text": [random_text(rng) for _ in range(1100)],
        "random_code_points": [random_code_points(rng) for _ in range(300)],
        "long_word": ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(300_000))],
        "stdlib_chunks": stdlib_chunks(rng),
    }
    whole = [read(name) for name in WHOLE_FILES]
    kinds["stdlib_files"] = whole
    with open(os.path.join(out_dir, "corpus.jsonl"), "w", encoding="ascii") as f:
        for strings in kinds.values():
            for s in strings:
                f.write(json.dumps(s) + "\n")
    with open(os.path.join(out_dir, "stdlib.jsonl"), "w", encoding="ascii") as f:
        for s in whole:
            f.write(json.dumps(s) + "\n")
    total = sum(len(v) for v in kinds.values())
    print("corpus: " + ", ".join(f"{k} {len(v)}" for k, v in kinds.items()) + f"; {total} strings; "
          f"stdlib files {sum(len(s.encode()) for s in whole)} bytes")


if __name__ == "__main__":
    main()
