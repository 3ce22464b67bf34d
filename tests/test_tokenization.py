"""tinytorch.text.tokenization: hand-worked BPE, round trips, Tiny Shakespeare, files, errors."""

import json
import subprocess
import sys
import time
import unicodedata
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import REPO
from tinytorch.text.tokenization import (
    BPETokenizer,
    CharTokenizer,
    Tokenizer,
    TokenizerFileError,
    get_pair_counts,
    merge_pair,
    split_on_special,
    split_words,
)

SHAKESPEARE = REPO / "milestones" / "data" / "tinyshakespeare.txt"
EOT = "<|endoftext|>"


@pytest.fixture(scope="module")
def shakespeare():
    return SHAKESPEARE.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def small_bpe():
    corpus = (
        "the quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs!\n"
        "naïve café résumé, 東京 and 京都, emoji 😀 and 😀 again.\n"
    ) * 5
    return BPETokenizer.train(corpus, vocab_size=330, special_tokens=[EOT])


def reference_merge(ids, pair, new_id):
    """Written independently of the package: left to right, non-overlapping."""
    out, i = [], 0
    while i < len(ids):
        if tuple(ids[i:i + 2]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def train_by_recounting(text, vocab_size):
    """BPE the slow, obvious way: recount every pair after every merge.

    Returns the merges and the final segmentation of every distinct word.
    """
    counts_of_words = Counter(split_words(text))
    seqs = {w: list(w.encode("utf-8")) for w in counts_of_words}
    merges = []
    for new_id in range(256, vocab_size):
        counts = Counter()
        for word, freq in counts_of_words.items():
            s = seqs[word]
            for pair in zip(s, s[1:]):
                counts[pair] += freq
        if not counts:
            break
        best = max(counts, key=lambda p: (counts[p], -p[0], -p[1]))
        if counts[best] < 2:
            break
        merges.append(best)
        seqs = {w: reference_merge(s, best, new_id) for w, s in seqs.items()}
    return merges, seqs


# ---- the hand-worked examples of the lesson ------------------------------------------

def test_hand_worked_pairs_and_merges():
    ids = list(b"aaabdaaabac")
    assert get_pair_counts(ids) == {(97, 97): 4, (97, 98): 2, (98, 100): 1, (100, 97): 1,
                                    (98, 97): 1, (97, 99): 1}
    s1 = merge_pair(ids, (97, 97), 256)
    s2 = merge_pair(s1, (97, 98), 257)
    s3 = merge_pair(s2, (256, 257), 258)
    assert s1 == [256, 97, 98, 100, 256, 97, 98, 97, 99]
    assert s2 == [256, 257, 100, 256, 257, 97, 99]
    assert s3 == [258, 100, 258, 97, 99]
    assert ids == list(b"aaabdaaabac")


def test_hand_worked_training_and_encoding():
    tok = BPETokenizer.train("aaabdaaabac", vocab_size=300)
    assert tok.merges == {(97, 97): 256, (97, 98): 257, (256, 257): 258}
    assert [tok.vocab[i] for i in (256, 257, 258)] == [b"aa", b"ab", b"aaab"]
    assert tok.vocab_size == 259  # stopped early: every pair occurs once
    assert tok.encode("aaabdaaabac") == [258, 100, 258, 97, 99]
    assert tok.encode("baaab") == [98, 258]
    assert tok.encode("aab") == [256, 98]  # "aa" was learned before "ab"
    assert tok.encode("aaaa") == [256, 256]
    assert tok.decode([98, 258]) == "baaab"


def test_hand_worked_char_vocabulary():
    tok = CharTokenizer.train("hello world")
    assert tok.chars == [" ", "d", "e", "h", "l", "o", "r", "w"]
    assert tok.encode("hello") == [3, 2, 4, 4, 5]
    assert tok.decode([7, 5, 6, 4, 1]) == "world"


def test_hand_worked_split_words():
    assert split_words("Hello, world!  It's 2024.\n") == [
        "Hello", ",", " world", "!", " ", " It", "'", "s", " 2024", ".", "\n"]


# ---- Tiny Shakespeare ----------------------------------------------------------------

def test_char_tokenizer_on_tiny_shakespeare_matches_nanogpt(shakespeare):
    assert len(shakespeare) == 1_115_394
    tok = CharTokenizer.train(shakespeare)
    assert tok.vocab_size == 65
    nanogpt_stoi = {ch: i for i, ch in enumerate(sorted(list(set(shakespeare))))}
    assert tok.stoi == nanogpt_stoi
    assert (tok.stoi["\n"], tok.stoi[" "], tok.stoi["A"], tok.stoi["Z"], tok.stoi["a"],
            tok.stoi["z"]) == (0, 1, 13, 38, 39, 64)
    assert tok.encode("hii there") == [46, 47, 47, 1, 58, 46, 43, 56, 43]
    ids = tok.encode(shakespeare)
    assert len(ids) == len(shakespeare) and max(ids) == 64
    assert tok.decode(ids) == shakespeare


def test_bpe_training_speed_and_compression(shakespeare):
    text = shakespeare[:100_000]
    start = time.perf_counter()
    tok = BPETokenizer.train(text, vocab_size=512)
    seconds = time.perf_counter() - start
    print(f"BPE: 100,000 characters to 512 ids in {seconds:.2f} s")
    assert tok.vocab_size == 512
    assert seconds < 20, f"training 100 KB to 512 ids took {seconds:.1f} s; expected a few"
    held_out = shakespeare[1_003_854:1_053_854]
    ids = tok.encode(held_out)
    assert tok.decode(ids) == held_out
    assert len(ids) / len(held_out) < 0.6  # about 0.52 tokens per character


def test_smaller_vocabularies_are_prefixes_of_larger_ones(shakespeare):
    """The lesson builds BPETokenizer(merges[:k]) as the tokenizer trained to 256 + k."""
    text = shakespeare[:20_000]
    big = list(BPETokenizer.train(text, vocab_size=400).merges)
    small = list(BPETokenizer.train(text, vocab_size=300).merges)
    assert small == big[:44]


def test_incremental_training_equals_recounting_on_shakespeare(shakespeare):
    text = shakespeare[:5_000]
    merges, seqs = train_by_recounting(text, 360)
    tok = BPETokenizer.train(text, vocab_size=360)
    assert list(tok.merges) == merges
    # encoding replays training: each word ends as training left it
    assert tok.encode(text) == [i for w in split_words(text) for i in seqs[w]]


# ---- properties ----------------------------------------------------------------------

@settings(max_examples=150, deadline=None)
@given(st.text())
def test_bpe_round_trips_any_text(small_bpe, text):
    ids = small_bpe.encode(text)
    assert all(type(i) is int and 0 <= i < small_bpe.vocab_size for i in ids)
    assert small_bpe.decode(ids) == text
    assert small_bpe.decode(small_bpe.encode_ordinary(text)) == text


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(["ab", "cd", EOT, "é", "😀 ", " ", "\n", "x<|"]), max_size=12))
def test_bpe_round_trips_text_with_special_tokens(small_bpe, parts):
    text = "".join(parts)
    ids = small_bpe.encode(text)
    assert small_bpe.decode(ids) == text
    assert ids.count(small_bpe.special_tokens[EOT]) == text.count(EOT)


@settings(max_examples=150, deadline=None)
@given(st.text())
def test_split_words_is_lossless(text):
    words = split_words(text)
    assert "".join(words) == text
    assert all(words)


@settings(max_examples=100, deadline=None)
@given(st.text(min_size=1))
def test_char_tokenizer_round_trips_its_own_text(text):
    tok = CharTokenizer.train(text)
    assert tok.decode(tok.encode(text)) == text
    assert tok.vocab_size == len(set(text))


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet="ab c\n", max_size=60), st.integers(256, 280))
def test_incremental_training_equals_recounting(text, vocab_size):
    """Small alphabets give many ties: the rule and the incremental counts must agree."""
    merges, seqs = train_by_recounting(text, vocab_size)
    tok = BPETokenizer.train(text, vocab_size=vocab_size)
    assert list(tok.merges) == merges
    assert tok.encode(text) == [i for w in split_words(text) for i in seqs[w]]


def test_training_is_the_same_in_every_process():
    code = (
        "from tinytorch.text.tokenization import BPETokenizer\n"
        "t = open('milestones/data/tinyshakespeare.txt', encoding='utf-8').read()[:8000]\n"
        "print(list(BPETokenizer.train(t, 320).merges))\n"
    )
    outputs = set()
    for seed in ("1", "2"):
        done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                              text=True, env={"PYTHONHASHSEED": seed, "PATH": ""}, timeout=60)
        assert done.returncode == 0, done.stderr
        outputs.add(done.stdout)
    assert len(outputs) == 1, "merges depend on string hashing: the tie rule is not total"


# ---- special tokens ------------------------------------------------------------------

def test_special_tokens_are_whole_units_with_ids_after_the_merges():
    corpus = f"hello world{EOT}hello there{EOT}" * 10
    tok = BPETokenizer.train(corpus, vocab_size=300, special_tokens=[EOT, "<|pad|>"])
    n = 256 + len(tok.merges)
    assert tok.special_tokens == {EOT: n, "<|pad|>": n + 1}
    assert tok.vocab_size == n + 2 <= 300
    assert not any(b"<|" in tok.vocab[i] or b"|>" in tok.vocab[i] for i in tok.merges.values())
    ids = tok.encode(f"{EOT}{EOT}hello<|pad|>")
    assert ids[:2] == [n, n] and ids[-1] == n + 1
    assert tok.decode(ids) == f"{EOT}{EOT}hello<|pad|>"
    assert n not in tok.encode_ordinary(EOT)


def test_split_on_special_prefers_the_longest_token():
    assert split_on_special("a<x>yb", ["<x>", "<x>y"]) == [("a", False), ("<x>y", True),
                                                           ("b", False)]
    assert split_on_special("a.b", ["."]) == [("a", False), (".", True), ("b", False)]


def test_char_tokenizer_special_tokens():
    tok = CharTokenizer.train(f"ab{EOT}ba", special_tokens=[EOT])
    assert tok.chars == ["a", "b"] and tok.special_tokens == {EOT: 2}
    assert tok.encode(f"a{EOT}b") == [0, 2, 1]
    assert tok.decode([2, 0]) == f"{EOT}a"


# ---- errors --------------------------------------------------------------------------

def test_unknown_characters_are_named_once_with_repr():
    tok = CharTokenizer.train("hello world")
    with pytest.raises(ValueError) as info:
        tok.encode("héllo\twörld é\t")
    message = str(info.value)
    assert "'é'" in message and "'\\t'" in message and "'ö'" in message
    assert message.count("'é'") == 1 and "'h'" not in message
    assert "BPETokenizer" in message  # says what to do
    with pytest.raises(ValueError, match="and 5 more"):
        tok.encode("".join(chr(0x4E00 + i) for i in range(25)))


def test_decode_errors_and_numpy_ids():
    char = CharTokenizer.train("abc")
    assert char.decode(np.array([0, 1, 2])) == "abc"
    with pytest.raises(ValueError, match="-1"):
        char.decode([0, -1])
    bpe = BPETokenizer.train("abab abab", vocab_size=260)
    assert bpe.decode(np.array(bpe.encode("abab"))) == "abab"
    with pytest.raises(ValueError, match="9999"):
        bpe.decode([97, 9999])
    assert bpe.decode([0xF0, 0x9F]) == "\ufffd"  # half an emoji: replaced, not an exception


def test_argument_errors():
    with pytest.raises(ValueError, match="too small"):
        BPETokenizer.train("abc", vocab_size=256, special_tokens=[EOT])
    with pytest.raises(TypeError, match="bytes"):
        BPETokenizer().encode(b"abc")
    with pytest.raises(TypeError):
        CharTokenizer.train("abc").encode(None)
    with pytest.raises(ValueError, match="non-empty"):
        CharTokenizer.train("abc", special_tokens=[""])
    with pytest.raises(ValueError, match="distinct"):
        BPETokenizer.train("abc", 300, special_tokens=[EOT, EOT])
    with pytest.raises(ValueError, match="single characters"):
        CharTokenizer(["ab", "c"])
    with pytest.raises(ValueError):
        BPETokenizer([(97, 256)])  # refers to an id that does not exist yet


def test_a_tiny_cache_changes_nothing():
    tok = BPETokenizer.train("the cat sat on the mat with the hat " * 5, vocab_size=280)
    text = "the cat sat on the mat, the bat sat on the hat"
    expected = tok.encode(text)
    fresh = BPETokenizer(list(tok.merges))
    fresh.cache_limit = 2
    assert fresh.encode(text) == expected and len(fresh._cache) == 2
    assert fresh.encode(text) == expected


# ---- files ---------------------------------------------------------------------------

def test_save_load_round_trip(tmp_path, shakespeare, small_bpe):
    char = CharTokenizer.train(shakespeare, special_tokens=[EOT])
    sample = shakespeare[500_000:510_000] + EOT + "naïve 😀"
    for tok, name in ((char, "char.json"), (small_bpe, "bpe.json")):
        path = tmp_path / name
        tok.save(path)
        data = json.loads(path.read_text(encoding="utf-8"))
        assert (data["format"], data["version"], data["type"], data["vocab_size"]) == (
            "tinytorch-tokenizer", 1, tok.kind, tok.vocab_size)
        for cls in (type(tok), Tokenizer):
            loaded = cls.load(path)
            assert type(loaded) is type(tok) and loaded.vocab_size == tok.vocab_size
            if tok is char:
                assert loaded.encode(sample[:10_000] + EOT) == tok.encode(sample[:10_000] + EOT)
            else:
                assert loaded.encode(sample) == tok.encode(sample)
    assert not list(tmp_path.glob("*.tmp")), "save leaves no temporary file behind"


def test_load_refuses_wrong_and_damaged_files(tmp_path, small_bpe):
    small_bpe.save(tmp_path / "bpe.json")
    CharTokenizer.train("abc").save(tmp_path / "char.json")
    with pytest.raises(TokenizerFileError, match="BPETokenizer"):
        CharTokenizer.load(tmp_path / "bpe.json")
    with pytest.raises(TokenizerFileError, match="CharTokenizer"):
        BPETokenizer.load(tmp_path / "char.json")

    good = json.loads((tmp_path / "bpe.json").read_text(encoding="utf-8"))
    damaged = {
        "truncated": (tmp_path / "bpe.json").read_text(encoding="utf-8")[:40],
        "binary": b"\x80\x04\x95 pickle".decode("latin-1"),
        "future_merge": json.dumps({**good, "merges": [[97, 300]] + good["merges"][1:]}),
        "no_merges": json.dumps({k: v for k, v in good.items() if k != "merges"}),
        "wrong_size": json.dumps({**good, "vocab_size": good["vocab_size"] + 1}),
        "not_object": json.dumps([good]),
        "bad_special": json.dumps({**good, "special_tokens": [""]}),
        "unsorted_chars": json.dumps({"format": "tinytorch-tokenizer", "version": 1,
                                      "type": "char", "vocab_size": 2, "chars": ["b", "a"],
                                      "special_tokens": []}),
    }
    for name, text in damaged.items():
        path = tmp_path / f"{name}.json"
        if name == "binary":
            path.write_bytes(b"\x80\x04\x95 pickle")
        else:
            path.write_text(text, encoding="utf-8")
        with pytest.raises(TokenizerFileError, match=f"{name}.json"):
            Tokenizer.load(path)
    assert issubclass(TokenizerFileError, ValueError)


# ---- Hugging Face tokenizer.json (byte-level BPE), against the `tokenizers` package ------
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_PATTERN = QWEN2_PATTERN.replace(r"|\p{N}|", r"|\p{N}{1,3}|")
HF_STYLES = ("gpt2", "gpt2-prefix-space", "qwen2", "llama3")
HF_TEXTS = [
    "", "hello world", "Hello, world!  It's 2024.\n", "   leading and trailing   ",
    "naïve café résumé", "東京と京都", "emoji 😀😀! 👍🏽", "digits 1234567890 3.14 1,000,000",
    "tabs\t\there\r\nwindows\nnewlines\n\n\n", "I'M HERE, YOU'LL SEE, they've we'd",
    "<|endoftext|>start<|im_start|>user\nhi<|im_end|>\n<|endoftext|>",
    "a<|endoftext|>b <|endoftext|> c", "wherefore art thou, whereforeX", "x <tool>  y",
    "ﬁ ligature Ａ１ full width e\u0301 combining", "\u00a0nbsp\u3000ideographic\u2028ls",
    "ROMEO:\nBut, soft! what light through yonder window breaks?", "x" * 50 + " " + "ab" * 30,
    "'s 's's", "  \n  \n", "$$$ ### %%% ... ???", "a\x00b\x1fc\x7f", "Ġ Ċ ĉ", "\r\r\n\n ",
]


def build_hf_tokenizer(style, corpus):
    """A small tokenizer trained by `tokenizers` in the style of GPT-2, Qwen2 or Llama 3."""
    from tokenizers import (
        AddedToken,
        Regex,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
        trainers,
    )
    from tokenizers import Tokenizer as HFTokenizer

    tok = HFTokenizer(models.BPE(ignore_merges=style == "llama3"))
    if style.startswith("gpt2"):
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=style != "gpt2")
    else:
        pattern = QWEN2_PATTERN if style == "qwen2" else LLAMA3_PATTERN
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    if style == "qwen2":
        tok.normalizer = normalizers.NFC()
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600, special_tokens=[EOT, "<|im_start|>", "<|im_end|>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([corpus], trainer)
    if style == "llama3":
        tok.add_special_tokens(["<|begin_of_text|>"])
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                          special_tokens=[("<|begin_of_text|>", bos)])])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_tokens([AddedToken("wherefore", normalized=False),
                    AddedToken("<tool>", lstrip=True, rstrip=True, normalized=False)])
    return tok


@pytest.fixture(scope="module")
def hf_tokenizers(tmp_path_factory, shakespeare):
    """{style: (the tokenizers package's tokenizer, the path of its tokenizer.json)}."""
    pytest.importorskip("tokenizers")
    corpus = shakespeare[:20_000] + (
        "\nnaïve café résumé 東京 京都 😀 emoji 12345 3.14159 I'M YOU'LL don't   tabs\t\tand"
        "\r\n lines ÀÉÎ ﬁ Ａ１\n") * 5
    folder = tmp_path_factory.mktemp("hf")
    out = {}
    for style in HF_STYLES:
        tok = build_hf_tokenizer(style, corpus)
        (folder / style).mkdir()
        tok.save(str(folder / style / "tokenizer.json"))
        out[style] = tok, folder / style / "tokenizer.json"
    return out


@pytest.mark.parametrize("style", HF_STYLES)
def test_hf_tokenizer_encodes_and_decodes_as_tokenizers_does(hf_tokenizers, style, shakespeare):
    from tinytorch.text.tokenization import ByteLevelBPETokenizer, load_hf_tokenizer

    theirs, path = hf_tokenizers[style]
    ours = load_hf_tokenizer(path)
    assert isinstance(ours, ByteLevelBPETokenizer)
    assert ours.vocab_size == theirs.get_vocab_size()
    texts = HF_TEXTS + [shakespeare[i:i + 400] for i in range(100_000, 140_000, 4_000)]
    for text in texts:
        for add in (True, False):
            assert ours.encode(text, add_special_tokens=add) == \
                theirs.encode(text, add_special_tokens=add).ids, (style, add, text)
        ids = theirs.encode(text).ids
        for skip in (True, False):
            assert ours.decode(ids, skip_special_tokens=skip) == \
                theirs.decode(ids, skip_special_tokens=skip), (style, skip, text)
    if style == "llama3":
        assert ours.encode("hi")[0] == theirs.token_to_id("<|begin_of_text|>")


@pytest.mark.parametrize("style", HF_STYLES)
def test_hf_tokenizer_on_random_text_and_ids(hf_tokenizers, style, tmp_path):
    """Random strings of awkward pieces, and random ids (half characters included); the file
    rewritten with merges in the older "a b" form and a normalized special token."""
    import random

    from tokenizers import Tokenizer as HFTokenizer

    from tinytorch.text.tokenization import load_hf_tokenizer

    _, path = hf_tokenizers[style]
    data = json.loads(path.read_text(encoding="utf-8"))
    data["model"]["merges"] = [" ".join(m) for m in data["model"]["merges"]]
    for token in data["added_tokens"]:
        if token["content"] == EOT:
            token["normalized"] = True
    (tmp_path / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    theirs = HFTokenizer.from_file(str(tmp_path / "tokenizer.json"))
    ours = load_hf_tokenizer(tmp_path)  # the folder
    rng = random.Random(0)
    pieces = list("abeéÉ東京😀 \t\n\r0123456789'.,!?-_<>|ﬁ\u0301\u00a0Ġ") + [
        EOT, "<tool>", "wherefore", "'s", "'LL"]
    for _ in range(600):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 30)))
        assert ours.encode(text) == theirs.encode(text).ids, text
        ids = [rng.randrange(theirs.get_vocab_size()) for _ in range(rng.randint(0, 8))]
        assert ours.decode(ids) == theirs.decode(ids), ids
        assert ours.decode(ids, False) == theirs.decode(ids, skip_special_tokens=False), ids


# ---- added tokens at the edges: single_word, lstrip/rstrip, as tokenizers draws them -----

def added_token_pair(tmp_path, added, normalizer=None):
    """(tokenizers' Tokenizer, ours) from one tokenizer.json: the 256 byte tokens (id = byte),
    no merges, ByteLevel, and the given AddedTokens (ids 256, 257, ... in order)."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers

    from tinytorch.text.tokenization import bytes_to_unicode, load_hf_tokenizer

    table = bytes_to_unicode()
    theirs = HFTokenizer(models.BPE(vocab={table[b]: b for b in range(256)}, merges=[]))
    theirs.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    theirs.decoder = decoders.ByteLevel()
    if normalizer is not None:
        theirs.normalizer = normalizer
    theirs.add_tokens(added)
    theirs.save(str(tmp_path / "tokenizer.json"))
    return theirs, load_hf_tokenizer(tmp_path / "tokenizer.json")


def assert_same_ids(theirs, ours, texts, what):
    wrong = [(t, theirs.encode(t).ids, ours.encode(t)) for t in texts
             if ours.encode(t) != theirs.encode(t).ids]
    assert not wrong, (
        f"{what}: {len(wrong)} of {len(texts)} texts get other ids than tokenizers'; first "
        + "; ".join(f"{t!r}: tokenizers {a}, ours {b}" for t, a, b in wrong[:3]))


def assert_same_ids_for_every_char(theirs, ours, chars, around, what):
    """around(ch) is a short text with ch beside an added token; forty such texts are joined
    by "|" (no word, no space) into one encode, and a chunk that disagrees is retried one
    character at a time to name the characters."""
    wrong = []
    for i in range(0, len(chars), 40):
        chunk = chars[i:i + 40]
        text = "|".join(map(around, chunk))
        if ours.encode(text) != theirs.encode(text).ids:
            wrong += [ch for ch in chunk
                      if ours.encode(around(ch)) != theirs.encode(around(ch)).ids]
    assert not wrong, (
        f"{what}: {len(wrong)} characters give other ids than tokenizers', e.g. "
        + "; ".join(f"U+{ord(ch):04X} ({unicodedata.category(ch)}) in {around(ch)!r}: tokenizers "
                    f"{theirs.encode(around(ch)).ids}, ours {ours.encode(around(ch))}"
                    for ch in wrong[:3]))


def test_single_word_uses_tokenizers_word_characters(tmp_path):
    """Issue #20: a single_word token next to a combining mark, a zero-width joiner, "²" or
    "½" is accepted or rejected as tokenizers' \\w decides, id for id."""
    pytest.importorskip("tokenizers")
    from tokenizers import AddedToken

    theirs, ours = added_token_pair(tmp_path, [AddedToken("abc", single_word=True,
                                                          normalized=False)])
    # tokenizers: a combining mark or a zero-width joiner continues the word (rejected);
    # "²" and "½" are numbers but not decimal digits, so they end it (accepted)
    cases = {"abc\u0301": [97, 98, 99, 0xCC, 0x81], "abc\u200d": [97, 98, 99, 0xE2, 0x80, 0x8D],
             "\u00b2abc": [0xC2, 0xB2, 256], "abc\u00bd": [256, 0xC2, 0xBD],
             "abc\u0903": [97, 98, 99, 0xE0, 0xA4, 0x83], "abc_": [97, 98, 99, 95],
             "x abc!": [120, 32, 256, 33]}
    for text, want in cases.items():
        assert theirs.encode(text).ids == want, f"tokenizers itself changed on {text!r}"
    assert_same_ids(theirs, ours, list(cases), "single_word beside awkward characters")
    # every character of the first 0x3000 code points (Latin, Greek, Cyrillic, Arabic, Indic,
    # combining marks, superscripts, fractions, Roman numerals, joiners), and a spread of
    # the rest, on either side of the token. Only assigned characters: the `regex` package
    # already knows Unicode 17's new letters, which tokenizers' Rust tables (Unicode 16) do not;
    # no surrogates (not text).
    chars = [chr(c) for c in [*range(0x3000), *range(0x3000, 0x110000, 97)]
             if unicodedata.category(chr(c)) not in ("Cn", "Cs")]
    assert_same_ids_for_every_char(theirs, ours, chars, lambda ch: f"abc{ch}",
                                   "single_word before a character")
    assert_same_ids_for_every_char(theirs, ours, chars, lambda ch: f"{ch}abc",
                                   "single_word after a character")


def test_lstrip_rstrip_strip_what_tokenizers_strips(tmp_path):
    """Issue #20: lstrip/rstrip swallow Unicode whitespace (tokenizers' \\s), not the
    separators \\x1c-\\x1f that str.isspace() also takes."""
    pytest.importorskip("tokenizers")
    from tokenizers import AddedToken

    theirs, ours = added_token_pair(tmp_path, [AddedToken("<t>", lstrip=True, rstrip=True,
                                                          normalized=False)])
    assert theirs.encode("a\x1c <t>\t\x1fb").ids == [97, 28, 256, 31, 98], "tokenizers changed"
    texts = ["a\x1c<t>\x1fb", "a\x1d\x1e <t> \x1e", "a \t\n<t>\r\n b", "a\x85<t>\u2028b",
             "a\u3000<t>\u00a0b", "a\u200b<t>\u180eb", "a\x0b\x0c<t>\u2029\u205f"]
    assert_same_ids(theirs, ours, texts, "lstrip/rstrip beside awkward characters")
    # U+3000, the ideographic space, is Unicode's last whitespace character
    assert_same_ids_for_every_char(theirs, ours, [chr(c) for c in range(0x3001)],
                                   lambda ch: f"a{ch}<t>{ch}{ch}b",
                                   "lstrip/rstrip beside a character")


def test_a_rejected_single_word_match_is_not_searched_again(tmp_path):
    """Issue #20: "abc" (single_word) rejected inside "abcd" hides "bcd" there, as in
    tokenizers, which goes on after the rejected match instead of one character later."""
    pytest.importorskip("tokenizers")
    from tokenizers import AddedToken

    theirs, ours = added_token_pair(tmp_path, [AddedToken("abc", single_word=True,
                                                          normalized=False),
                                               AddedToken("bcd", normalized=False)])
    assert theirs.encode("abcd").ids == [97, 98, 99, 100], "tokenizers itself changed"
    assert ours.encode("abcd") == [97, 98, 99, 100], (
        f"'abcd': the rejected 'abc' covers 'bc', so 'bcd' is not found; got {ours.encode('abcd')}")
    assert_same_ids(theirs, ours, ["abcd", "xabcd", "abcdabc bcd", "abc bcd", "abcbcd",
                                   "ab abcd bcd abc"], "a rejected single_word match")


def test_added_tokens_on_random_awkward_text(tmp_path):
    """Random text of word characters, non-word characters and whitespace by both
    definitions, around single_word, lstrip and rstrip tokens, normalized or not (one whose
    content is not NFC is matched, and decoded, in its NFC form, as tokenizers does)."""
    pytest.importorskip("tokenizers")
    import random

    from tokenizers import AddedToken, normalizers

    added = [AddedToken("abc", single_word=True, normalized=False),
             AddedToken("bcd", normalized=False),
             AddedToken("<t>", lstrip=True, rstrip=True, normalized=False),
             AddedToken("café", single_word=True, lstrip=True),  # matched after NFC
             AddedToken("\t", rstrip=True, normalized=False),
             AddedToken("nai\u0308ve", rstrip=True)]  # not NFC: matched as NFC "naïve"
    theirs, ours = added_token_pair(tmp_path, added, normalizers.NFC())
    rng = random.Random(0)
    pieces = ["abc", "bcd", "<t>", "café", "cafe\u0301", "\t", "a", "b", "d", " ", "\n", "_",
              "\u0301", "\u200d", "\u00b2", "\u00bd", "5", "\u0660", "\x1c", "\x1f", "\x85",
              "\u3000", "\u00a0", "!", "-", "\u0903", "\u2167", "naïve", "nai\u0308ve"]
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 12))) for _ in range(3000)]
    assert_same_ids(theirs, ours, texts, "random text around added tokens")
    ids = [theirs.encode(text).ids for text in texts[:300]]
    wrong = [i for i in ids if ours.decode(i) != theirs.decode(i)]
    assert not wrong, (f"{len(wrong)} decodes differ, e.g. {wrong[0]}: tokenizers "
                       f"{theirs.decode(wrong[0])!r}, ours {ours.decode(wrong[0])!r}")


def test_hf_tokenizer_saves_and_loads_as_a_tinytorch_file(hf_tokenizers, tmp_path):
    from tinytorch.text.tokenization import load_hf_tokenizer

    ours = load_hf_tokenizer(hf_tokenizers["qwen2"][1])
    ours.save(tmp_path / "tok.json")
    back = Tokenizer.load(tmp_path / "tok.json")
    text = "café<|im_start|>東京 1234"
    assert type(back) is type(ours) and back.encode(text) == ours.encode(text)


def test_hf_tokenizer_bad_files_are_named(tmp_path, hf_tokenizers):
    from tinytorch.text.tokenization import load_hf_tokenizer

    path = tmp_path / "tokenizer.json"
    path.write_bytes(b"\x80\x04pickle")
    with pytest.raises(TokenizerFileError, match="tokenizer.json.*JSON"):
        load_hf_tokenizer(path)
    good = json.loads(hf_tokenizers["gpt2"][1].read_text(encoding="utf-8"))
    cases = [
        (lambda d: d["model"].update(type="WordPiece"), "not BPE"),
        (lambda d: d.update(pre_tokenizer={"type": "Metaspace"}), "Metaspace"),
        (lambda d: d.update(normalizer={"type": "Lowercase"}), "Lowercase"),
        (lambda d: d.update(decoder={"type": "WordPiece"}), "decoder"),
        (lambda d: d["model"].update(merges=[["a", "b", "c"]]), "merge 0"),
        (lambda d: d["model"].pop("vocab"), "vocab"),
        (lambda d: d["model"].update(continuing_subword_prefix="##"), "continuing_subword"),
    ]
    for change, words in cases:
        data = json.loads(json.dumps(good))
        change(data)
        path.write_text(json.dumps(data), encoding="utf-8")
        with pytest.raises(TokenizerFileError, match=words) as caught:
            load_hf_tokenizer(path)
        assert "tokenizer.json" in str(caught.value)
    ours = load_hf_tokenizer(hf_tokenizers["gpt2"][1])
    with pytest.raises(ValueError, match="cannot decode ids \\[99999\\]"):
        ours.decode([1, 99999])


def test_lesson_does_not_import_the_cli():
    """Issue #15: a lesson must not import the course's command-line tool."""
    source = (REPO / "modules" / "10_tokenization" / "tokenization.py").read_text()
    assert "from tito" not in source and "import tito" not in source
