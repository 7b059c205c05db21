#!/usr/bin/env python3
"""Write tests/fixtures/tokenizers/strings.json: the tokenizer parity test strings.

Stdlib only, deterministic (fixed seed). Usage:
    python3 tools/reference/make_strings.py [OUT]   (default tests/fixtures/tokenizers/strings.json)

Each category is a list of strings; the output is {"version": 1, "strings": [...]} with a
parallel "categories" list naming the category of each string (handy in test failure messages).
Duplicates are removed (first occurrence kept).
"""
import json
import random
import sys

rng = random.Random(20240611)
cats = []  # (category, string)


def add(cat, *items):
    for s in items:
        cats.append((cat, s))


# ==== Edge cases ====
add("edge", "", " ", "  ", "a", "A", "0", "\n", "\t", "\r", "\r\n", ".", "'", "\"", "\\", "\x00",
    "\x01\x02\x7f", "é", "中", "😀", "\u00a0", "\u3000", " a", "a ", " a ", "  a  ")

# ==== Latin with diacritics ====
add("latin",
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "Ça va? Très bien, merci. Où est la bibliothèque?",
    "Straße, Größe, Übermäßig, ÄÖÜ äöü ß ẞ",
    "El niño comió jalapeños en la montaña; ¿qué tal? ¡Olé!",
    "Sø og æbler på Ærø; Åse går til Østerbro.",
    "Zażółć gęślą jaźń. Łódź, Kraków, Gdańsk.",
    "Příliš žluťoučký kůň úpěl ďábelské ódy.",
    "Árvíztűrő tükörfúrógép",
    "Şişli'de çay içtik; İstanbul, ığdır, Ğ ğ",
    "Tiếng Việt có dấu: Người, được, những, chữ, Ạ ạ Ặ ặ",
    "Ångström, naïve café, coöperate, façade, résumé, jalapeño",
    "Ł ł Đ đ Ħ ħ Ŋ ŋ Œ œ Ĳ ĳ ŉ ſ",
    "ﬁ ﬂ ﬀ ﬃ ﬄ (ligatures) and ＦＵＬＬＷＩＤＴＨ latin",
    "𝐁𝐨𝐥𝐝 𝑰𝒕𝒂𝒍𝒊𝒄 𝔉𝔯𝔞𝔨𝔱𝔲𝔯 (mathematical alphanumerics)",
    "Ⅻ Ⅳ ⅸ ① ② ③ ⑴ ⒜ ㊙",
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor.",
    "UPPER CASE SENTENCE WITH WORDS", "lower case sentence with words", "MiXeD CaSe WoRdS",
    "camelCaseIdentifier snake_case_identifier kebab-case-identifier SCREAMING_SNAKE",
    )

# ==== Greek, Cyrillic ====
add("greek",
    "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.",
    "Καλημέρα κόσμε! Ἀρχὴ ἥμισυ παντός. ᾯ ᾧ ῷ",
    "αβγδεζηθικλμνξοπρστυφχψω ΑΒΓΔΕΖΗΘΙΚΛΜΝΞΟΠΡΣΤΥΦΧΨΩ ς",
    "Σίσυφος ΣΊΣΥΦΟΣ ϊ ΰ ΐ")
add("cyrillic",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Привет, мир! Как дела? Ёлка, ёж, ЁЖИК.",
    "Україна: ґанок, їжак, єнот, Ї Є Ґ",
    "Српски: Ђорђе, ћерка, џеп, љубав, њива",
    "Български език: щастие, ъгъл, юг, ябълка",
    "Қазақ тілі: әже, ғасыр, қала, ң, ө, ұ, ү, һ, і")

# ==== RTL ====
add("arabic",
    "مرحبا بالعالم",
    "اللغة العربية جميلة جدًا، أليس كذلك؟",
    "بِسْمِ اللَّهِ الرَّحْمَٰنِ الرَّحِيمِ",
    "الأرقام: ٠١٢٣٤٥٦٧٨٩ و ۰۱۲۳۴۵۶۷۸۹",
    "فارسی: سلام، حال شما چطور است؟ گ چ پ ژ",
    "اردو: یہ ایک جملہ ہے۔",
    "Mixed English and عربي in one line 123.")
add("hebrew",
    "שלום עולם",
    "עִבְרִית עם ניקוד: בְּרֵאשִׁית בָּרָא",
    "Hebrew inside English: שלום! and numbers 42.",
    "\u202bRLE embedded\u202c and \u200fRLM\u200e LRM marks")

# ==== Indic, SE Asian ====
add("devanagari",
    "नमस्ते दुनिया",
    "हिन्दी भाषा में लिखा गया वाक्य।",
    "क्षत्रिय ज्ञान श्री त्र द्ध",
    "संस्कृतम् : धर्मक्षेत्रे कुरुक्षेत्रे समवेता युयुत्सवः",
    "০১২৩ বাংলা ভাষা", "தமிழ் மொழி", "తెలుగు భాష", "ಕನ್ನಡ", "മലയാളം", "ગુજરાતી", "ਪੰਜਾਬੀ")
add("thai",
    "สวัสดีชาวโลก",
    "ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ",
    "กรุงเทพมหานคร อมรรัตนโกสินทร์",
    "ລາວ ພາສາ", "ភាសាខ្មែរ", "မြန်မာဘာသာ", "ཀ་ཁ་ག་ང")

# ==== CJK, Hangul, kana ====
add("cjk",
    "你好，世界！",
    "中华人民共和国成立于一九四九年。",
    "我爱自然语言处理和机器学习。",
    "繁體中文：這是一個測試。",
    "汉字和English混合with数字123。",
    "「引号」『书名』【括号】《书》〈篇〉",
    "𠀀𠀁𪚥𰻞 (CJK extension B+ ideographs)",
    "一二三四五六七八九十百千万亿",
    "，。！？；：、“”‘’（）——……")
add("hangul",
    "안녕하세요 세계",
    "한국어 문장입니다. 띄어쓰기가 있습니다!",
    "ㄱㄴㄷㄹ ㅏㅑㅓㅕ (jamo)",
    "\u1100\u1161\u11a8 (conjoining jamo) vs 각")
add("japanese",
    "こんにちは世界",
    "カタカナとひらがなと漢字を混ぜた日本語の文です。",
    "ｶﾀｶﾅ (half-width katakana) ﾞﾟ",
    "東京都渋谷区・新宿区　全角スペース",
    "ゔ ゕ ゖ ヷ ヺ ー 〜 々 〆",
    "吾輩は猫である。名前はまだ無い。")

# ==== Emoji ====
add("emoji",
    "😀😃😄😁😆😅😂🤣",
    "I ❤️ NY", "❤", "❤️", "☺", "☺️",
    "👨‍👩‍👧‍👦 family ZWJ",
    "👩‍💻 👨‍🚀 🧑‍🔬 🏳️‍🌈 🏴‍☠️",
    "👋🏻 👋🏼 👋🏽 👋🏾 👋🏿 skin tones",
    "🧑🏽‍🤝‍🧑🏻 couple with tones",
    "🇺🇸 🇯🇵 🇩🇪 🇫🇷 🇧🇷 flags",
    "🇺🇸🇯🇵🇩🇪",
    "🏴󠁧󠁢󠁳󠁣󠁴󠁿 tag-sequence flag",
    "1️⃣ 2️⃣ #️⃣ *️⃣ 🔟 keycaps",
    "Emoji at end 🎉", "🎉 Emoji at start", "mid🎉word",
    "🤖🦾🧠🫠🫶🪿 newer emoji",
    "👍👍👍👍👍👍👍👍👍👍")

# ==== Combining marks ====
add("combining",
    "e\u0301 vs \u00e9",                        # decomposed vs precomposed
    "A\u030a vs \u00c5 vs \u212b",              # ring + angstrom sign
    "n\u0303 o\u0308 u\u0308 a\u0300",
    "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034dA\u0334\u0335\u031c\u0330\u0354\u036bL\u0368\u0367\u0369\u0358\u0320G\u0311\u0357\u030e\u0305\u035b\u0341\u0334\u033b\u0348\u034d\u0354\u0339O\u0342\u030c\u030c\u0358\u0328\u0335\u0339\u033b\u031d\u0333",
    "\u0915\u094d\u200d\u0937",                 # virama + ZWJ
    "q\u0307\u0323 (dot above + dot below)",
    "\u1e69 vs s\u0323\u0307 vs s\u0307\u0323",
    "\uac00 vs \u1100\u1161",
    "\u0301 leading combining mark",
    "\u0041\u030A\u0301 stacked")

# ==== Numbers ====
nums = ["0", "7", "42", "123", "1234", "12345", "123456", "1234567", "12345678901234567890",
        "3.14159", "2.71828182845904523536", "-17", "+5", "1e10", "6.022e23", "0x1F", "0b1010",
        "1,000", "1,000,000", "1.000.000,50", "1 000 000", "1'000'000", "१२३४", "٣٤٥",
        "$1,234.56", "€99,99", "¥10000", "50%", "3/4", "½ ¼ ¾", "2024-06-11", "12:34:56",
        "v1.2.3", "192.168.0.1", "+1 (555) 123-4567", "ISBN 978-3-16-148410-0"]
add("numbers", *nums)
add("numbers", "In 2023, 1234567 people paid $12.50 each (total: 15,432,087.50).",
    "Call 911 or 112; room 404 at 10:30.", "π ≈ 3.141592653589793238462643383279",
    "".join(str(rng.randrange(10)) for _ in range(100)))
for n in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 16, 33):
    add("numbers", "".join(str(rng.randrange(10)) for _ in range(n)))

# ==== Contractions ====
add("contractions",
    "it's", "don't", "we're", "I've", "I'm", "you'll", "he'd",
    "IT'S", "DON'T", "WE'RE", "I'VE", "I'M", "YOU'LL", "HE'D",
    "It'S DoN'T We'Re",
    "I'm sure you'll find they've said he'd've done it, but it's not what we're told.",
    "'s 't 're 've 'm 'll 'd", "'S 'T 'RE 'VE 'M 'LL 'D",
    "rock 'n' roll, 'tis, ol' man, y'all, ma'am",
    "dog's bone; dogs' bones; James's book",
    "it’s (curly apostrophe) don’t",
    "''double single'' quotes", "x's", " 's")

# ==== Whitespace ====
add("whitespace",
    "a  b", "a   b", "a    b", "a\tb", "a\t\tb", "a \t b", "\t\tindented",
    "line1\nline2", "line1\r\nline2", "line1\rline2", "line1\n\nline2", "line1\n\n\nline2",
    "mixed\r\n\n\r\rnewlines\n\r\n", "trailing newline\n", "\nleading newline",
    "   leading spaces", "trailing spaces   ", "   both   ", " \n \n ", "\n\n\n\n",
    " " * 16, "\t" * 8, " \t\n\r\x0b\x0c", "a\u00a0b\u2009c\u202fd\u2003e",
    "word\u2028line sep\u2029para sep", "a\x0bb\x0cc", "a\x85b (NEL)",
    "end with spaces and newline  \n", "  \n  indented after newline",
    "tabs\tand  spaces \t\n mixed \r\n\tend")

# ==== Code ====
add("code",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "import numpy as np\nx = np.zeros((3, 4), dtype=np.float32)\nprint(x.shape)  # (3, 4)\n",
    "class Foo(Bar):\n\tdef __init__(self, *args, **kwargs):\n\t\tsuper().__init__(*args, **kwargs)\n",
    "lambda x: x**2 if x>0 else -x//3 % 7",
    "#include <stdio.h>\n\nint main(void) {\n    printf(\"Hello, %s!\\n\", \"world\");\n    return 0;\n}\n",
    "for (int i = 0; i < n; ++i) { a[i] += b[i] * c[i]; }",
    "static inline uint32_t rotl(uint32_t x, int k) { return (x << k) | (x >> (32 - k)); }",
    "ptr->field = &arr[idx]; *p++ = 0xFF; x >>= 2; y ^= ~z;",
    "{\"name\": \"mlxcel\", \"version\": \"0.1.0\", \"tags\": [\"llm\", \"cuda\"], \"n\": 3.5e-2, \"ok\": true, \"x\": null}",
    "{\n  \"a\": {\n    \"b\": [1, 2, {\"c\": \"d\"}]\n  }\n}",
    "#!/bin/bash\nset -euo pipefail\nfor f in *.txt; do echo \"$f\"; done | sort -u > out.log 2>&1\n",
    "grep -rn 'TODO' src/ | awk -F: '{print $1}' | uniq -c",
    "curl -sSL https://example.com/install.sh | sh -s -- --prefix=$HOME/.local",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%son' ORDER BY id DESC;",
    "<html><body><div class=\"x\">Hello &amp; bye</div></body></html>",
    "fn main() { let v: Vec<u8> = vec![1, 2, 3]; println!(\"{:?}\", v); }",
    "const f = async (a, b) => { await g(a ?? b); return `${a}-${b}`; };",
    "x=1;y=2;z=x+y", "a==b!=c<=d>=e&&f||g", "::std::vector<int>", "@decorator\n@property",
    "    # comment with 4-space indent\n        nested = True\n",
    "```python\nprint('hi')\n```",
    "$$\\int_0^\\infty e^{-x^2} dx = \\frac{\\sqrt{\\pi}}{2}$$",
    "// C++ comment\n/* block\n   comment */",
    "if err != nil {\n\treturn nil, fmt.Errorf(\"open %s: %w\", path, err)\n}")

# ==== URLs, e-mails ====
add("urls",
    "https://www.example.com/path/to/page?query=1&other=two#fragment",
    "http://localhost:8080/v1/chat/completions",
    "ftp://user:pass@ftp.example.org:21/dir/file.tar.gz",
    "Visit https://github.com/huggingface/tokenizers/issues/1234 for details.",
    "https://例え.jp/パス?q=日本語", "https://xn--r8jz45g.jp/",
    "file:///home/user/Documents/report%20final.pdf",
    "john.doe+filter@example.co.uk", "Contact: support@mlxcel.dev, sales@mlxcel.dev.",
    "user_name-123@sub.domain.example.museum", "<mailto:a@b.c>",
    "www.example.com", "example.com/a/b/c.html", "data:text/plain;base64,SGVsbG8sIFdvcmxkIQ==")

# ==== Special-token text inside prose ====
specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>",
            "<|end_header_id|>", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<s>", "</s>",
            "<unk>", "<pad>", "<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>", "[INST]",
            "[/INST]", "<think>", "</think>", "<tool_call>", "</tool_call>", "<|reserved_special_token_0|>",
            "<|finetune_right_pad_id|>", "<|python_tag|>", "<|vision_start|>", "<mask>"]
for sp in specials:
    add("special", sp, "Before " + sp + " after", "x" + sp + "y")
add("special",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "<s>[INST] Hello [/INST] Hi</s>",
    "<start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n",
    "< s > <s <|im_start <|im_start| |im_start|> <|IM_START|>",
    "<s><s></s></s>", " <s> ", "<|eot_id|><|eot_id|>")

# ==== Long words, repetition ====
add("long",
    "a" * 300, "ab" * 200, "x" * 1000, "Ж" * 320, "中" * 400, "😀" * 100,
    "Pneumonoultramicroscopicsilicovolcanoconiosis" * 7,
    "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(512)),
    "".join(rng.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") for _ in range(400)),
    "Donaudampfschifffahrtselektrizitätenhauptbetriebswerkbauunterbeamtengesellschaft",
    "https://example.com/" + "a/" * 200,
    "-" * 80, "=" * 64, "." * 50, "!" * 33, "?!" * 20, "\n" * 40, " " * 300, "\t" * 50,
    "aaaa", "aaaaaaaa", "aaaaaaaaaaaaaaaa", "    ", "        ", "0" * 64, "9" * 17,
    "ha" * 50, "na na na na na na na na Batman", "🙂🙂🙂🙂🙂🙂🙂🙂", "ーーーーーーーー",
    "...", "…", "----", "____", "****", "####", "~~~~", "````", "''''")

# ==== Zero-width and invisible ====
add("zerowidth",
    "zero\u200bwidth\u200bspace", "zero\u200cwidth\u200cnon\u200cjoiner", "zwj\u200d\u200djoin",
    "\ufeffBOM at start", "word\u2060joiner", "soft\u00adhyphen", "\u200b", "\u200d", "\ufeff",
    "a\u180eb (mongolian vowel separator)", "invisible\u2062times\u2063sep\u2064plus",
    "variation\ufe0f selector\ufe0e", "\u034fcgj", "\u061c arabic letter mark")

# ==== Unusual but valid UTF-8 ====
add("valid_odd",
    "\ufffd replacement char", "\ufffe\uffff noncharacters BMP", "\U0001fffe\U0001ffff",
    "\U0010fffe\U0010ffff plane 16 nonchars", "\ufdd0\ufdef",
    "\ue000\ue001\uf8ff private use", "\U000f0000\U000ffffd\U00100000 supplementary PUA",
    "\U0001d11e musical G clef", "\U00013000 egyptian hieroglyph", "\U0001f600\U000e0001",
    "\x7f\x80\x9f C1 controls", "\u0000nul inside", "tab\x09bell\x07esc\x1b[0m",
    "\U00010348 gothic hwair", "\u2603 \u2764 \u2605 \u262f", "\u00bf\u00a1\u00a7\u00b6\u00a9\u00ae\u2122",
    "\u2200x\u2208\u211d: x\u00b2 \u2265 0 \u2227 \u2203y \u2260 \u2205",
    "\u2190\u2191\u2192\u2193 \u21d2 \u27f6", "\u2500\u2502\u250c\u2510\u2514\u2518 box drawing",
    "\u00b0C \u00b5m \u2126 \u212b \u2103")

# ==== Single characters ====
for ch in "aZ9~ \t\n!@#$%^&*()_+-=[]{}|;:',.<>/?`\"\\" + "éßøñçΩжあア한中😀🇺":
    add("single", ch)

# ==== Mixed prose (generated, deterministic) ====
words = ("the of and to in is that for it as with was on be by at this from or have an they "
         "which one you were all we her she there would their will when who him been has more "
         "model token cache kernel batch decode prefill attention GPU memory latency throughput "
         "naïve café 東京 Москва Αθήνα 서울 مرحبا 😀 123 4.5 $7 it's we've I'm").split()
for i in range(40):
    n = rng.randrange(3, 30)
    s = " ".join(rng.choice(words) for _ in range(n))
    if i % 3 == 0:
        s = s.capitalize() + "."
    if i % 5 == 0:
        s += "\n" + " ".join(rng.choice(words) for _ in range(5))
    if i % 7 == 0:
        s = "  " + s + "\t"
    add("mixed", s)

# ==== Output ====
seen = set()
strings, categories = [], []
for cat, s in cats:
    if s in seen:
        continue
    seen.add(s)
    strings.append(s)
    categories.append(cat)

out = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/tokenizers/strings.json"
assert len(strings) >= 320, len(strings)
with open(out, "w", encoding="utf-8") as f:
    json.dump({"version": 1, "generator": "tools/reference/make_strings.py",
               "strings": strings, "categories": categories}, f, ensure_ascii=True, indent=0)
    f.write("\n")
print(f"wrote {len(strings)} strings to {out}")
