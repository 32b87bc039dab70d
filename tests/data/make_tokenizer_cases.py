#!/usr/bin/env python3
"""Writes tests/data/tokenizer_cases.jsonl: adversarial inputs for the
tokenizer check against the reference tokenizers (tests/tokenizer_oracle.py). ASCII-escaped JSON so
the file is byte-exact whatever the editor. Re-run after editing the list."""
import json, os

cases = [
    "", " ", "\n", "'", "a", "Hello world!", "grabbed", " grabbed", "           grabbed",
    # CJK, Japanese, Korean, mixed with punctuation and in long runs
    "中文字符测试，日本語のテキスト、한국어 텍스트。",
    "我们的研究表明这个方法在多个数据集上都取得了最好的结果而且速度非常快",
    "東京都渋谷区 カタカナ ひらがな 漢字 ｶﾀｶﾅ 全角ＡＢＣ１２３",
    # emoji: astral plane, ZWJ sequences, skin tones, flags, keycaps, variation selectors
    "🦙🦙🦙 👨‍👩‍👧‍👦 🏳️‍🌈 👍🏽 🇺🇸🇩🇪 1️⃣ ♥️ 😀😃😄😁",
    "Llamas 🦙 are great🦙🦙! 🦙Ꙋ Ꙋ🦙",
    # combining marks and complex scripts
    "e\u0301 a\u0300\u0316 n\u0303 Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034da\u0300lgo",
    "नमस्ते दुनिया العربية עִבְרִית ภาษาไทย 각 Ελληνικά Привет мир",
    "İstanbul ı ß STRASSE straße ﬁ ﬂ Ǆ ǅ ǆ ſ 'ſ 'S 'ſt",
    # digit runs in many number systems
    "1234567890 3.14159265358979 1,000,000 -42 1e-10 0x1F 2024-11-21",
    "1" * 1001, "٠١٢٣٤٥٦٧٨٩ ۰۱۲ ①②③ Ⅻ ⅷ １２３４５ ½¾ ²³ 𝟙𝟚𝟛",
    # whitespace runs, tabs, unicode spaces
    "a  b   c    d     e", " " * 50, "\t\t\tx", "\ttabs\t\t\t\tout here", "line\n\n\n\nnext",
    "end   ", "  \n  \n", "\t \t \n \t", "nbsp\u00a0here \u3000ideographic\u2003em\u2009thin\u202fnarrow",
    "nel\u0085line bom\ufeffhere zw\u200bsp zwj\u200dx lrm\u200e",
    " " * 10000 + "x", "\n" * 300, "\t" * 257 + "y",
    # CRLF and lone CR
    "line1\r\nline2\r\n\r\nline3\r", "\r\r\n\n\r", "a\r\n b \r\n\r\n  c",
    # contractions and quotes
    "I'm you're he'll they'd it's WE'VE DON'T 'S 'sS ''s", "‘quoted’ “double” don’t",
    # text that spells special tokens (ordinary text unless --allow-special)
    "<|begin_of_text|>", "<|eot_id|>text<|end_of_text|>", "<|reserved_special_token_247|><|reserved_special_token_248|>",
    "<|finetune_right_pad_id|><|python_tag|><|eom_id|>", "<|<|eot_id|>|>", "<|eot_id", "eot_id|>", "<||>",
    "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
    # long runs of one symbol and odd bytes
    "=" * 5000, "a" * 3000, "!!!!!!????....", "-" * 99 + "\n" + "_" * 77,
    "control\u0000\u0001\u0007\u007f chars", "\ue000 private \ufffd replacement \ufffe \U0010fffd end",
    "aGVsbG8gd29ybGQhIFRoaXMgaXMgYmFzZTY0IGVuY29kZWQ=" * 20,
    # LaTeX, code, URLs
    "\\begin{equation}\\label{eq:1} x^2 + y_{i,j} = \\frac{\\alpha}{\\beta} \\end{equation}",
    "def f(x):\n    return x**2  # comment\n\n\tif x>=0: pass\n",
    "https://example.com/path?q=1&r=%20#frag user@example.org",
    # digits of other scripts, one by one (Digits, Qwen2) or in runs (GPT-2), next to letters
    "Digits \u0663\u0664\u0665 \u0967\u0968\u0969 \u2460\u2461\u2462 \u216b \u00bd \uff11\uff12\uff13 "
    "\U0001d7d9\U0001d7da \u0e51\u0e52 12345678 3.14159 1,000,000",
    " 123 abc123def 1a2b3c x\u00b2\u00b3 \u2074\u2075 v2.0.1-rc3 2024-11-26T07:40Z",
    # contractions in every case; U+017F and U+212A fold to s and k in Oniguruma's (?i)
    "I'm, you're, he'S, THEY'RE, it'LL, we'Ve, she'D, 'S'T, don't' ''s 'x",
    "\u017f'\u017f '\u017f '\u212a 'K \u0130'S",
    # whitespace fringes: U+0085 is White_Space, U+FEFF and U+200B are not
    "a \t\n  b\u00a0\u00a0c\u2003\u2003d\u3000e  \r\n\r\n f   ",
    "\u0085\u0085x \ufeffy\u200bz\u2028w\u2029v\u000bu\u000ct\u001cs",
    "   leading and trailing   ",
    " \n \n \t\t\n",
    # SmolLM2's and Llama 3's special tokens spelled out in the text
    "<|im_start|>user\nHi 42<|im_end|>\n<|endoftext|><repo_name>x<file_sep><|im_start|",
    "<|endoftext|><|endoftext|>a<jupyter_code>b<jupyter_text>c<empty_output>",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
    "x1 \u00e99 's9 A1B2 \u0391\u03b2\u03b3123 \u4e2d\u65871\u4e8c",
    # bytes that SmolLM2's vocabulary has no token for (its BPE drops them)
    "!\u0004!\u0006? \u0013\u0014 a\u001db",
    "it'\u017ft'\u017fs DON'\u017fT '\u212aay x'\u017f\u017f",
]

here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "tokenizer_cases.jsonl"), "w", encoding="ascii") as f:
    for c in cases:
        f.write(json.dumps({"text": c}, ensure_ascii=True) + "\n")
print(len(cases), "cases")
