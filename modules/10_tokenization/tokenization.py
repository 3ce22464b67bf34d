# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Module 10: Tokenization
#
# ## Overview
#
# A language model never reads text. It reads a sequence of integers, one per **token**,
# and it writes one integer at a time. The **tokenizer** is the pair of functions that
# turns text into those integers (`encode`) and integers back into text (`decode`). It is
# the first and the last step of every language model, and it is a systems decision as
# much as a linguistic one:
#
# - Its **vocabulary size** sets the size of the model's embedding table (module 11) and of
#   its output layer: one row, and one score per step, for every possible id.
# - Its **tokens per character** set how long the sequences are. Attention costs grow with
#   the square of the sequence length (module 12), and a context window of 256 tokens holds
#   256 characters or about a thousand, depending on the tokenizer.
#
# You build the two tokenizers that sit at the two ends of this trade-off. A **character
# tokenizer** gives every distinct character an id: Tiny Shakespeare needs only 65 of them,
# and the TinyGPT milestone uses it. A **byte-level BPE tokenizer**, the kind GPT-2 and its
# successors use, starts from the 256 possible bytes and learns from data which adjacent
# pairs to merge into new tokens, so that frequent words become single tokens and no text
# is ever unknown.
#
# **In numbers.** Measured on Tiny Shakespeare (the figure on the module's web page, `tito
# site figures`): the character tokenizer has 65 ids and costs 1 token per character; a
# byte-level BPE with 1,000 ids costs 0.44 tokens per character, so the same context window
# holds more than twice the text, for an embedding table 15 times larger.
#
# ## Learning objectives
#
# - State the tokenizer contract (`encode`, `decode`, `vocab_size`) and why
#   `decode(encode(text)) == text` must hold for every text.
# - Build a character vocabulary that is the same on every run and every machine, with the
#   same ids as nanoGPT's `shakespeare_char`.
# - Explain UTF-8, and why a tokenizer that starts from bytes never meets an unknown
#   character.
# - Train byte-pair encoding by hand and in code, with a documented tie-breaking rule, and
#   make training fast by updating pair counts instead of recounting them.
# - Encode by replaying the learned merges in the order they were learned.
# - Keep special tokens such as `<|endoftext|>` whole, with ids of their own.
# - Save a tokenizer as plain JSON that says what it is, and load it back with clear errors
#   for the wrong file.
# - Measure the trade-off between vocabulary size, sequence length and speed.
#
# ## What you build
#
# - `Tokenizer`: the base class with `encode`, `decode`, `vocab_size`, `save(path)` and
#   `Tokenizer.load(path)`; `TokenizerFileError` for files that cannot be loaded.
# - `CharTokenizer`: one id per character, built with `CharTokenizer.train(text)`.
# - `split_on_special(text, special_tokens)`: cut text around special tokens.
# - `get_pair_counts(ids)` and `merge_pair(ids, pair, new_id)`: the two steps of BPE.
# - `split_words(text)`: a simple, lossless pre-split of text into words.
# - `BPETokenizer`: `BPETokenizer.train(text, vocab_size, special_tokens=())`, then
#   `encode` and `decode` for any text.
# - `bytes_to_unicode()` and `ByteLevelBPETokenizer` (`load_hf_tokenizer(path)`): the
#   byte-level BPE tokenizers of GPT-2, Qwen2 and Llama 3, read from their `tokenizer.json`,
#   id for id as Hugging Face's `tokenizers` encodes and decodes.
#
# ## What you are not building yet
#
# - **Vectors.** A token id is just an index; module 11 (embeddings) turns ids into
#   learned vectors.
# - **Other kinds of tokenizers.** WordPiece, SentencePiece and Unigram models, and training
#   GPT-2-style tokenizers (Part 8 reads them). Once BPE is yours, each is a variation you
#   can read.
# - **Normalization.** No lowercasing, no Unicode normalization (NFC, NFKC): the tokenizer
#   sees the text exactly as it is given and gives it back exactly.
# - **Batching, padding and truncation.** Module 05 batches sequences of ids; module 12
#   masks padding in attention.

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| default_exp text.tokenization
#| export
import json
import os
import re
import unicodedata
from collections import Counter
from pathlib import Path

import regex  # Part 8: `re` has no \p{L} (letter) or \p{N} (number) classes

# %% nbgrader={"grade": false, "grade_id": "lesson-imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
# For this lesson's tests only (not exported): module 01's test helper.
from tinytorch.core.tensor import expect_error

# %% [markdown]
# ## Part 1: the contract, and a file format
#
# A tokenizer is two functions and a number:
#
# ```
# encode("To be")      -> [32, 53, 1, 40, 43]      text -> list of ids
# decode([32, 53])     -> "To"                     ids  -> text
# vocab_size           -> 65                       every id is in range(vocab_size)
# ```
#
# (These are the ids of the character tokenizer of Tiny Shakespeare that you build in
# Part 2.)
#
# One property matters above all: **`decode(encode(text)) == text`, exactly, for every text
# the tokenizer accepts.** A tokenizer that lowercases, drops characters it does not know
# or maps them to a catch-all `<unk>` id changes the data the model learns from, silently,
# and the model's output can never contain what was lost. Both tokenizers in this module
# are lossless; the character tokenizer refuses (with a clear error) the text it cannot
# represent, and the byte-level one can represent everything.
#
# **Special tokens** are strings such as `<|endoftext|>` that mark structure, for example
# where one document ends and the next begins. Each has an id of its own and is never
# split into pieces. The base class's `encode` cuts the text around special tokens (you
# write that cut in Part 3) and hands the ordinary text between them to
# `encode_ordinary`, which each tokenizer writes for itself.
#
# **Saving.** A trained tokenizer belongs to the model trained with it: the same id means
# a different token under another tokenizer, so the model's output would decode to
# nonsense. It must be saved beside the weights and loaded back exactly. Use **JSON, not
# pickle**: `pickle.load` runs whatever code the file's author put in it, while JSON is only
# data, you can read it in an editor, and every language can load it. A saved character
# tokenizer looks like this:
#
# ```json
# {"format": "tinytorch-tokenizer", "version": 1, "type": "char", "vocab_size": 8,
#  "chars": [" ", "d", "e", "h", "l", "o", "r", "w"], "special_tokens": []}
# ```
#
# `format` says what the file is, `version` lets a later TinyTorch change the layout, and
# `type` says which class reads the rest. `vocab_size` is a check: after loading, the
# tokenizer must have that many ids. Each subclass provides its own fields as a dict
# (`_state()`) and builds itself back from them (`_from_state(state)`); each sets `kind`,
# the value of `type`, and registers itself in `Tokenizer._kinds` just by being defined
# (`__init_subclass__`).
#
# Write `save` and `load`.
#
# - `save(path)` writes `{"format", "version", "type", "vocab_size"}` plus `self._state()`
#   as JSON (`json.dumps` keeps non-ASCII characters safe as `\u` escapes). Write to a
#   temporary file beside the target and `os.replace` it into place, so that a crash in the
#   middle never leaves half a tokenizer on disk.
# - `load(path)` is a classmethod. It checks, in order, and raises `TokenizerFileError`
#   (a `ValueError`) naming the file and what to do when: the file is not UTF-8 JSON (a
#   truncated file, or a pickle); the JSON is not an object with
#   `"format": "tinytorch-tokenizer"`; the `version` is not 1; the `type` is unknown; the
#   `type` is not the class asked for (`CharTokenizer.load` on a BPE file; `Tokenizer.load`
#   accepts any type and picks the class from `type`); building the tokenizer from the
#   fields fails with `KeyError`, `TypeError` or `ValueError`, or gives a different
#   `vocab_size`. A missing file may raise `FileNotFoundError` as usual.

# %% nbgrader={"grade": false, "grade_id": "tokenizer-base", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
FILE_FORMAT = "tinytorch-tokenizer"
FILE_VERSION = 1


class TokenizerFileError(ValueError):
    """A file that cannot be loaded as a tokenizer; the message says why and what to do.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = Path(folder) / "notes.json"
    ...     _ = path.write_text('{"notes": []}')
    ...     try:
    ...         Tokenizer.load(path)
    ...     except TokenizerFileError as error:
    ...         print(str(error).replace(folder, "TMP").split(": it")[0])
    TMP/notes.json is JSON but not a TinyTorch tokenizer file
    """


def _require_text(text):
    if not isinstance(text, str):
        hint = " (decode it first: data.decode('utf-8'))" if isinstance(text, bytes) else ""
        raise TypeError(f"encode expects a str, got {type(text).__name__}{hint}")


class Tokenizer:
    """Text <-> list of integer ids. Subclasses write `encode_ordinary` and `decode`.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = Path(folder) / "chars.json"
    ...     CharTokenizer.train("hello world").save(path)
    ...     tokenizer = Tokenizer.load(path)  # the file names the class
    >>> tokenizer, tokenizer.encode("hello")
    (CharTokenizer(vocab_size=8), [3, 2, 4, 4, 5])
    """

    kind = ""  # the "type" field of a saved file: "char", "bpe"
    _kinds = {}  # kind -> subclass, filled as subclasses are defined; `load` reads it
    special_tokens = {}  # special-token string -> its id; set by every subclass

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.kind:
            Tokenizer._kinds[cls.kind] = cls

    # ---- what every subclass provides ------------------------------------------------
    @property
    def vocab_size(self):
        """How many ids exist: every id is in range(vocab_size)."""
        raise NotImplementedError

    def encode_ordinary(self, text):
        """text -> ids, treating special-token strings as ordinary text."""
        raise NotImplementedError

    def decode(self, ids):
        """ids -> text."""
        raise NotImplementedError

    def _state(self):
        """The subclass's own fields, as a dict of JSON values."""
        raise NotImplementedError

    @classmethod
    def _from_state(cls, state):
        raise NotImplementedError

    # ---- shared ------------------------------------------------------------------------
    def encode(self, text):
        """text -> ids; special tokens in the text become their own ids."""
        _require_text(text)
        if not self.special_tokens:
            return self.encode_ordinary(text)
        ids = []
        for piece, is_special in split_on_special(text, self.special_tokens):
            if is_special:
                ids.append(self.special_tokens[piece])
            else:
                ids.extend(self.encode_ordinary(piece))
        return ids

    @staticmethod
    def _number_special_tokens(tokens, first_id):
        """Check the special tokens and give them ids first_id, first_id + 1, ..."""
        tokens = [tokens] if isinstance(tokens, str) else list(tokens)
        for token in tokens:
            if not isinstance(token, str) or not token:
                raise ValueError(f"a special token must be a non-empty string, got {token!r}")
        if len(set(tokens)) != len(tokens):
            raise ValueError(f"special tokens must be distinct, got {tokens!r}")
        return {token: first_id + i for i, token in enumerate(tokens)}

    def __repr__(self):
        return f"{type(self).__name__}(vocab_size={self.vocab_size})"

    # ---- files -------------------------------------------------------------------------
    def save(self, path):
        """Write this tokenizer to `path` as JSON (never pickle)."""
        ### BEGIN SOLUTION
        path = Path(path)
        data = {"format": FILE_FORMAT, "version": FILE_VERSION, "type": self.kind,
                "vocab_size": self.vocab_size, **self._state()}
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(data) + "\n", encoding="utf-8")
        os.replace(tmp, path)
        ### END SOLUTION

    @classmethod
    def load(cls, path):
        """Read a tokenizer saved by `save`; Tokenizer.load picks the class from the file."""
        ### BEGIN SOLUTION
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise TokenizerFileError(
                f"{path} is not a tokenizer file: it is not UTF-8 JSON ({error}). It may be "
                "truncated, or another kind of file (a pickle?). Save the tokenizer again "
                "with tokenizer.save(path)."
            ) from None
        if not isinstance(data, dict) or data.get("format") != FILE_FORMAT:
            raise TokenizerFileError(
                f"{path} is JSON but not a TinyTorch tokenizer file: it has no "
                f'"format": "{FILE_FORMAT}" field. Load it with the tool that wrote it.'
            )
        if data.get("version") != FILE_VERSION:
            raise TokenizerFileError(
                f"{path} is a tokenizer file of version {data.get('version')!r}; this "
                f"TinyTorch reads version {FILE_VERSION}. Save it again with this version."
            )
        kind = data.get("type")
        if kind not in Tokenizer._kinds:
            raise TokenizerFileError(
                f"{path} holds a tokenizer of unknown type {kind!r}; known types are "
                f"{sorted(Tokenizer._kinds)}."
            )
        actual = Tokenizer._kinds[kind]
        if cls is not Tokenizer and actual is not cls:
            raise TokenizerFileError(
                f"{path} holds a {kind!r} tokenizer ({actual.__name__}), not a {cls.kind!r} "
                f"one. Load it with {actual.__name__}.load(path), or with "
                "Tokenizer.load(path), which picks the class from the file."
            )
        try:
            tokenizer = actual._from_state(data)
        except (KeyError, TypeError, ValueError) as error:
            raise TokenizerFileError(
                f"{path} is a damaged {kind!r} tokenizer file ({type(error).__name__}: "
                f"{error}). Save the tokenizer again."
            ) from None
        if tokenizer.vocab_size != data.get("vocab_size"):
            raise TokenizerFileError(
                f"{path} says vocab_size={data.get('vocab_size')!r} but its fields make "
                f"{tokenizer.vocab_size} ids: the file is damaged. Save the tokenizer again."
            )
        return tokenizer
        ### END SOLUTION


# %% [markdown]
# ### Test: files that are not tokenizers
#
# Saving and loading real tokenizers is tested once they exist (Parts 2, 6 and 7). Here:
# every wrong file gives a `TokenizerFileError` that names the file.

# %% nbgrader={"grade": true, "grade_id": "test_unit_tokenizer_file_errors", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_tokenizer_file_errors():
    """Corrupt, foreign and unknown files raise TokenizerFileError with a useful message."""
    import pickle
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        cases = {
            "truncated.json": ('{"format": "tinytorch-tokenizer", "vers', "JSON"),
            "list.json": ("[1, 2, 3]", "format"),
            "other.json": ('{"model": "gpt", "layers": 4}', "format"),
            "future.json": ('{"format": "tinytorch-tokenizer", "version": 99, "type": "char"}',
                            "99"),
            "unknown.json": ('{"format": "tinytorch-tokenizer", "version": 1, "type": "wordpiece"}',
                             "wordpiece"),
        }
        checks = {  # what each file tests, to name the missing check
            "future.json": "check data['version'] before reading the rest, and name it",
            "unknown.json": "check data['type'] against the known kinds, and name it",
            "model.pkl": "catch UnicodeDecodeError / json.JSONDecodeError and say it is not JSON",
        }
        for name, (text, _clue) in cases.items():
            (folder / name).write_text(text, encoding="utf-8")
        (folder / "model.pkl").write_bytes(pickle.dumps({"not": "json"}))
        cases["model.pkl"] = (None, "JSON")
        def check_refused(name, clue):
            try:
                Tokenizer.load(folder / name)
            except TokenizerFileError as error:
                assert name in str(error), f"the error for {name} should name the file: {error}"
                assert clue in str(error), (
                    f"loading {name} should explain the problem and mention {clue!r}, got: "
                    f"{error}" + (f" ({checks[name]})" if name in checks else "")
                )
            except NotImplementedError:
                raise
            except Exception as error:
                raise AssertionError(
                    f"loading {name} raised {type(error).__name__}: {error}. Catch it and raise "
                    "TokenizerFileError with a message that says what is wrong with the file"
                ) from None
            else:
                raise AssertionError(f"Tokenizer.load({name}) must raise TokenizerFileError")

        for name, (_, clue) in cases.items():
            check_refused(name, clue)
        assert issubclass(TokenizerFileError, ValueError), "TokenizerFileError is a ValueError"
        ### BEGIN HIDDEN TESTS
        from tinytorch.core.tensor import hidden_cases

        header = '{"format": "tinytorch-tokenizer", "version": %s, "type": %s}'
        more = {
            "empty.json": ("", "JSON"), "null.json": ("null", "format"),
            "unmarked.json": ('{"version": 1, "type": "char"}', "format"),
            "old.json": (header % ("0", '"char"'), "0"),
            "named.json": (header % ('"one"', '"char"'), "one"),
            "untyped.json": ('{"format": "tinytorch-tokenizer", "version": 1}', "None"),
        }
        for name, (text, _) in more.items():
            (folder / name).write_text(text, encoding="utf-8")
        (folder / "binary.json").write_bytes(b"\xff\xfe\x00 not text")
        hidden_cases(check_refused, {
            "an empty file": ("empty.json", "JSON"),
            "JSON null": ("null.json", "format"),
            "a version and type without a format": ("unmarked.json", "format"),
            "an older version": ("old.json", "0"),
            "a version that is a word": ("named.json", "one"),
            "no type at all": ("untyped.json", "None"),
            "bytes that are not text": ("binary.json", "JSON"),
        })
        ### END HIDDEN TESTS


test_unit_tokenizer_file_errors()


# %% [markdown]
# ## Part 2: one token per character
#
# The simplest tokenizer gives every distinct character of a training text its own id.
# Which id? Sort the distinct characters by Unicode code point and number them from 0.
# By hand, for the text `"hello world"`:
#
# ```
# distinct characters, sorted:  ' '  'd'  'e'  'h'  'l'  'o'  'r'  'w'
# ids:                           0    1    2    3    4    5    6    7
#
# encode("hello") = [3, 2, 4, 4, 5]        encode("world") = [7, 5, 6, 4, 1]
# decode([3, 2, 4, 4, 5, 0, 7, 5, 6, 4, 1]) = "hello world"
# ```
#
# **Why sorted.** `list(set(text))` also gives each character a number, but a different
# number on every run: Python randomizes the hashes of strings per process, so the order
# of a set of strings changes between runs. A model trained in one run and used in the next
# would read every id as the wrong character. Sorting makes the vocabulary a function of
# the text alone. It is also nanoGPT's convention (`chars = sorted(list(set(data)))`), so
# on Tiny Shakespeare your ids are nanoGPT's: its 65 characters run from `'\n'` (0) and
# `' '` (1) through the punctuation, `'A'`..`'Z'` (13..38) and `'a'`..`'z'` (39..64), and
# `"hii there"` encodes to `[46, 47, 47, 1, 58, 46, 43, 56, 43]`.
#
# **The cost.** One token per character: Tiny Shakespeare is 1,115,394 tokens, and a
# 256-token context holds 256 characters, about nine lines of the play. The vocabulary,
# though, is tiny, so the embedding table is small: 65 rows.
#
# **Unknown characters.** A character tokenizer can only encode characters it has seen.
# Dropping the others, or mapping them all to one `<unk>` id, would break the round trip.
# Raise a `ValueError` instead that **names** the unknown characters, each once, in the
# order they appear, with `repr` so that invisible ones (a tab, a non-breaking space) can be
# seen, and says what to do. Likewise, `decode` raises a `ValueError` naming any id that
# is not in the vocabulary (check before looking up: with a list, `itos[-1]` would quietly
# return the last character).
#
# Write `__init__` (the vocabulary: `self.chars`, `self.stoi` character -> id, `self.itos`
# id -> string, including the special tokens given to it by `_number_special_tokens`),
# `encode_ordinary` and `decode`. `CharTokenizer(corpus)` builds the vocabulary from any
# string; the classmethod `train(text, special_tokens=())` first takes the special tokens
# out of the text, so that their characters do not enter the vocabulary.

# %% nbgrader={"grade": false, "grade_id": "char-tokenizer", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
class CharTokenizer(Tokenizer):
    """One id per character: the distinct characters of a corpus, sorted by code point.

    >>> text = "hello world<|end|>"
    >>> tokenizer = CharTokenizer.train(text, special_tokens=["<|end|>"])
    >>> tokenizer.chars, tokenizer.vocab_size
    ([' ', 'd', 'e', 'h', 'l', 'o', 'r', 'w'], 9)
    >>> ids = tokenizer.encode("low<|end|>")
    >>> ids, tokenizer.decode(ids)
    ([4, 5, 7, 8], 'low<|end|>')
    """

    kind = "char"

    def __init__(self, corpus="", special_tokens=()):
        """Vocabulary from `corpus` (a string, or any iterable of single characters)."""
        for ch in set(corpus):
            if not isinstance(ch, str) or len(ch) != 1:
                raise ValueError(
                    f"CharTokenizer's vocabulary is made of single characters, got {ch!r}. "
                    "To build it from several texts, join them into one string first."
                )
        # Set self.chars (sorted list), self.stoi (char -> id), self.special_tokens
        # (token -> id, after the characters) and self.itos (id -> char or token).
        ### BEGIN SOLUTION
        self.chars = sorted(set(corpus))
        self.stoi = {ch: i for i, ch in enumerate(self.chars)}
        self.special_tokens = self._number_special_tokens(special_tokens, len(self.chars))
        self.itos = {i: ch for ch, i in self.stoi.items()}
        self.itos.update({i: token for token, i in self.special_tokens.items()})
        ### END SOLUTION

    @classmethod
    def train(cls, text, special_tokens=()):
        """The character vocabulary of `text`, without the special tokens' characters."""
        _require_text(text)
        tokens = cls._number_special_tokens(special_tokens, 0)
        if tokens:
            text = "".join(p for p, special in split_on_special(text, tokens) if not special)
        return cls(text, list(tokens))

    @property
    def vocab_size(self):
        return len(self.chars) + len(self.special_tokens)

    def encode_ordinary(self, text):
        """One id per character; unknown characters raise a ValueError that names them."""
        _require_text(text)
        ### BEGIN SOLUTION
        stoi = self.stoi
        try:
            return [stoi[ch] for ch in text]
        except KeyError:
            unknown = list(dict.fromkeys(ch for ch in text if ch not in stoi))
            shown = ", ".join(repr(ch) for ch in unknown[:20])
            more = f" and {len(unknown) - 20} more" if len(unknown) > 20 else ""
            raise ValueError(
                f"CharTokenizer cannot encode {len(unknown)} character(s) that are not in "
                f"its vocabulary of {len(self.chars)}: {shown}{more}. Train it on text that "
                "contains them (CharTokenizer.train(corpus + new_text)), remove them from "
                "the input, or use BPETokenizer, which encodes any text."
            ) from None
        ### END SOLUTION

    def decode(self, ids):
        """ids -> text; ids outside the vocabulary raise a ValueError that names them."""
        ### BEGIN SOLUTION
        ids = list(ids)
        itos = self.itos
        try:
            return "".join([itos[i] for i in ids])
        except (KeyError, TypeError):
            bad = list(dict.fromkeys(i for i in ids if not _is_known(i, itos)))
            raise ValueError(
                f"cannot decode ids {bad[:20]}: this CharTokenizer has ids 0.."
                f"{self.vocab_size - 1}. Were they made by a different tokenizer?"
            ) from None
        ### END SOLUTION

    def _state(self):
        return {"chars": self.chars, "special_tokens": list(self.special_tokens)}

    @classmethod
    def _from_state(cls, state):
        tokenizer = cls(state["chars"], state["special_tokens"])
        if tokenizer.chars != state["chars"]:
            raise ValueError("'chars' must be distinct single characters in sorted order")
        return tokenizer


def _is_known(i, table):
    try:
        return i in table
    except TypeError:  # unhashable, e.g. a list inside the ids
        return False


# %% [markdown]
# ### Test: the character tokenizer, by hand
#
# The ids below are the ones worked out above for `"hello world"`.

# %% nbgrader={"grade": true, "grade_id": "test_unit_char_tokenizer", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def test_unit_char_tokenizer():
    """Sorted vocabulary, the hand-worked ids, decode, round trip, save and load."""
    tok = CharTokenizer.train("hello world")
    assert tok.chars == [" ", "d", "e", "h", "l", "o", "r", "w"], (
        f"the vocabulary of 'hello world' should be its distinct characters sorted by code "
        f"point, [' ', 'd', 'e', 'h', 'l', 'o', 'r', 'w'], got {tok.chars}: use "
        "sorted(set(corpus)), never the order of a set"
    )
    assert tok.vocab_size == 8, f"vocab_size should be 8, got {tok.vocab_size}"
    got = tok.encode("hello")
    assert got == [3, 2, 4, 4, 5], (
        f"encode('hello') should be [3, 2, 4, 4, 5] (h=3, e=2, l=4, o=5), got {got}: "
        "ids are positions in the sorted vocabulary"
    )
    assert all(type(i) is int for i in got), "encode should return a list of Python ints"
    assert tok.encode("world") == [7, 5, 6, 4, 1], f"encode('world') gave {tok.encode('world')}"
    text = tok.decode([3, 2, 4, 4, 5, 0, 7, 5, 6, 4, 1])
    assert text == "hello world", (
        f"decode of the hand-worked ids gave {text!r}, expected 'hello world'"
    )
    assert tok.encode("") == [] and tok.decode([]) == "", "empty text <-> empty list of ids"
    for sample in ("low", "dole", "  hello  ", "rowed"):
        assert tok.decode(tok.encode(sample)) == sample, f"round trip of {sample!r} failed"
    for bad in ([8], [-1], [3, 99, 2]):
        try:
            tok.decode(bad)
        except ValueError as error:
            culprit = [i for i in bad if not 0 <= i < 8][0]
            assert str(culprit) in str(error), (
                f"decode({bad}) should name the bad id {culprit}: {error}"
            )
        else:
            raise AssertionError(
                f"decode({bad}) must raise ValueError: the ids run from 0 to 7 (a negative "
                "index into a list silently wraps around; check before looking up)"
            )

    def check_char(corpus, samples):
        """train(corpus): sorted distinct characters, ids their positions, round trips, and a
        ValueError naming an id past the end."""
        tok = CharTokenizer.train(corpus)
        chars = sorted(set(corpus))
        assert tok.chars == chars and tok.vocab_size == len(chars), (
            f"the vocabulary of {corpus!r} should be {chars}, got {tok.chars}: use "
            "sorted(set(corpus))"
        )
        for sample in samples:
            ids = tok.encode(sample)
            assert ids == [chars.index(ch) for ch in sample], (
                f"encode({sample!r}) gave {ids}: ids are positions in the sorted vocabulary"
            )
            assert tok.decode(ids) == sample, f"round trip of {sample!r} failed"
        bad = len(chars)
        try:
            tok.decode([0, bad])
        except ValueError as error:
            assert str(bad) in str(error), f"decode([0, {bad}]) should name the bad id: {error}"
        else:
            raise AssertionError(
                f"decode([0, {bad}]) must raise ValueError: the last id is {bad - 1}")

    check_char("hello world", ["low", "dole"])
    again = CharTokenizer("dlrow olleh")
    assert again.chars == tok.chars, "CharTokenizer(corpus) builds the same sorted vocabulary"
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "char.json"
        tok.save(path)
        loaded = CharTokenizer.load(path)
        assert isinstance(loaded, CharTokenizer) and loaded.chars == tok.chars, (
            "CharTokenizer.load should give back a CharTokenizer with the same characters"
        )
        assert loaded.encode("hello world") == tok.encode("hello world"), (
            "a loaded tokenizer must encode exactly like the one that was saved"
        )
        assert json.loads(path.read_text(encoding="utf-8"))["type"] == "char", (
            "the saved file should say \"type\": \"char\""
        )
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    hidden_cases(check_char, {
        "accented letters and digits": ("Zoë 2 café 10", ["café", "2 Zo", ""]),
        "a single repeated character": ("aaaa", ["a", "aaa"]),
        "newlines, tabs and symbols": ("a\tb\n{c}!", ["{\n}", "!a\tb"]),
        "characters outside the basic plane": ("😀x😀y", ["y😀x", "😀"]),
    })
    ### END HIDDEN TESTS


test_unit_char_tokenizer()


# %% nbgrader={"grade": true, "grade_id": "test_unit_char_unknown", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
def test_unit_char_unknown():
    """Encoding a character outside the vocabulary names it, once, in a ValueError."""

    def check_unknown(corpus, text, unknown, known):
        """encode(text) names every character of `unknown` once, and no character of `known`."""
        tok = CharTokenizer.train(corpus)
        error = expect_error(
            f"encode({text!r}) with the vocabulary of {corpus!r}", lambda: tok.encode(text),
            ValueError, [repr(ch) for ch in unknown], "name each unknown character with repr(), "
            "in a ValueError, instead of letting a KeyError escape")
        for ch in unknown:
            assert str(error).count(repr(ch)) == 1, (
                f"{ch!r} should be named once (deduplicate): {error}"
            )
        for ch in known:
            assert repr(ch) not in str(error), f"{ch!r} is in the vocabulary: {error}"

    check_unknown("hello world", "help!\thelp!", "p!\t", "h")
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    hidden_cases(check_unknown, {
        "upper case of known letters": ("abc", "AbCabc", "AC", "b"),
        "one unknown character many times": ("xyz", "xqqqqy", "q", "xy"),
        "an emoji and a newline": ("text", "te😀\nxt", "😀\n", "tx"),
    })
    ### END HIDDEN TESTS


test_unit_char_unknown()


# %% [markdown]
# On the real data: the character tokenizer of this course's copy of Tiny Shakespeare
# (skipped if the file is not found from here).

# %% nbgrader={"grade": false, "grade_id": "demo-shakespeare-chars", "locked": false, "schema_version": 3, "solution": false, "task": false}
def find_tiny_shakespeare():
    """The course's Tiny Shakespeare file, or None if it cannot be found from here."""
    # The folder named by TINYTORCH_DATA (set by the course's tools where they run this
    # notebook), else milestones/data in this folder or one above it.
    folders = [Path(os.environ["TINYTORCH_DATA"])] if os.environ.get("TINYTORCH_DATA") else []
    folders += [Path.cwd().joinpath(*[".."] * up, "milestones", "data") for up in range(4)]
    for folder in folders:
        if (folder / "tinyshakespeare.txt").is_file():
            return folder / "tinyshakespeare.txt"
    return None


shakespeare_path = find_tiny_shakespeare()
if shakespeare_path is not None:
    shakespeare = shakespeare_path.read_text(encoding="utf-8")
    chars = CharTokenizer.train(shakespeare)
    print(f"Tiny Shakespeare: {len(shakespeare):,} characters, vocab_size {chars.vocab_size}")
    print("first ids:", {ch: chars.stoi[ch] for ch in chars.chars[:5]}, "...")
    print("encode('hii there') =", chars.encode("hii there"))
else:
    print("Tiny Shakespeare not found from", Path.cwd())

# %% [markdown]
# ## Part 3: special tokens
#
# A special token is matched in the text as a whole unit, before any other tokenizing.
# `split_on_special(text, special_tokens)` cuts the text into pieces and marks which pieces
# are special tokens:
#
# ```
# split_on_special("Hi<|endoftext|>Yo<|endoftext|>", ["<|endoftext|>"])
#   -> [("Hi", False), ("<|endoftext|>", True), ("Yo", False), ("<|endoftext|>", True)]
# ```
#
# Empty pieces are left out (two special tokens in a row give no `("", False)` between
# them), and joining all the pieces gives the text back. When two special tokens could
# match at the same place, the **longest** wins: with `["<x>", "<x>y"]`, the text
# `"a<x>yb"` is `[("a", False), ("<x>y", True), ("b", False)]`.
#
# One way: Python's `re.split` with a pattern in parentheses keeps the separators, at the
# odd positions of its result. Build the pattern from `re.escape(token)` for each token
# (`|`, `.`, `+` and `?` have meanings in a pattern), longest first, because at each
# position the pattern tries the alternatives left to right and takes the first that
# matches.
#
# With this, a tokenizer made with special tokens encodes them as their ids:
#
# ```
# tok = CharTokenizer.train("ab<|eot|>ba", special_tokens=["<|eot|>"])
# tok.chars == ['a', 'b']                 '<', '|', 'e', ... are not in the vocabulary
# tok.encode("ab<|eot|>") == [0, 1, 2]    the special token's id comes after the characters
# tok.decode([2]) == "<|eot|>"
# ```
#
# A warning from practice: text that comes from users may contain the string
# `<|endoftext|>`, and `encode` will turn it into the real token. Use `encode_ordinary` for
# text you do not control; it treats the string as ordinary characters (and for this
# `CharTokenizer`, `'<'` and `'|'` are then unknown).

# %% nbgrader={"grade": false, "grade_id": "split-on-special", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def split_on_special(text, special_tokens):
    """[(piece, is_special), ...]: text cut around whole special tokens, longest first.

    >>> split_on_special("hi<|end|>there<|end|>", {"<|end|>": 256})
    [('hi', False), ('<|end|>', True), ('there', False), ('<|end|>', True)]
    """
    ### BEGIN SOLUTION
    if not special_tokens:
        return [(text, False)] if text else []
    ordered = sorted(special_tokens, key=len, reverse=True)
    pattern = "(" + "|".join(re.escape(token) for token in ordered) + ")"
    pieces = []
    for i, piece in enumerate(re.split(pattern, text)):
        if piece:
            pieces.append((piece, i % 2 == 1))
    return pieces
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_unit_special_tokens_char", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_special_tokens_char():
    """split_on_special by hand; special tokens in CharTokenizer are whole units."""
    got = split_on_special("Hi<|endoftext|>Yo<|endoftext|>", ["<|endoftext|>"])
    want = [("Hi", False), ("<|endoftext|>", True), ("Yo", False), ("<|endoftext|>", True)]
    assert got == want, f"split_on_special gave {got}, expected {want}"
    got = split_on_special("<|a|><|a|>x", ["<|a|>"])
    assert got == [("<|a|>", True), ("<|a|>", True), ("x", False)], (
        f"two special tokens in a row should give no empty piece between them, got {got}"
    )
    got = split_on_special("a<x>yb", ["<x>", "<x>y"])
    assert got == [("a", False), ("<x>y", True), ("b", False)], (
        f"with tokens '<x>' and '<x>y', 'a<x>yb' should match the longest, '<x>y', got {got}: "
        "sort the tokens longest first before building the pattern"
    )
    got = split_on_special("1+1=2|3", ["+", "|"])
    assert got == [("1", False), ("+", True), ("1=2", False), ("|", True), ("3", False)], (
        f"characters such as '+' and '|' mean something in a regular expression: escape "
        f"each token with re.escape, got {got}"
    )
    assert split_on_special("plain", []) == [("plain", False)], "no special tokens: one piece"
    assert split_on_special("", ["<s>"]) == [], "the empty text has no pieces"

    def check_split(text, tokens, want):
        got = split_on_special(text, tokens)
        assert got == want, (
            f"split_on_special({text!r}, {tokens}) gave {got}, expected {want}: escape each "
            "token, try the longest first, and keep no empty piece"
        )

    def check_specials(corpus, specials, text, want):
        """train(corpus, special_tokens): the specials get the ids after the characters."""
        tok = CharTokenizer.train(corpus, special_tokens=specials)
        got = tok.encode(text)
        assert got == want, f"encode({text!r}) should be {want}, got {got}"
        assert tok.decode(got) == text, f"decode gave {tok.decode(got)!r}"

    check_split("x<s>", ["<s>"], [("x", False), ("<s>", True)])
    check_specials("ab<|eot|>ba", ["<|eot|>"], "ba<|eot|>", [1, 0, 2])
    tok = CharTokenizer.train("ab<|eot|>ba", special_tokens=["<|eot|>"])
    assert tok.chars == ["a", "b"], (
        f"train() should leave the special token's characters out of the vocabulary, got "
        f"{tok.chars}"
    )
    assert tok.special_tokens == {"<|eot|>": 2} and tok.vocab_size == 3, (
        f"the special token should get id 2, after the characters, got {tok.special_tokens}"
    )
    got = tok.encode("ab<|eot|>ba")
    assert got == [0, 1, 2, 1, 0], f"encode('ab<|eot|>ba') should be [0, 1, 2, 1, 0], got {got}"
    assert tok.decode(got) == "ab<|eot|>ba", f"decode gave {tok.decode(got)!r}"
    try:
        tok.encode_ordinary("a<|eot|>")
    except ValueError:
        pass
    else:
        raise AssertionError("encode_ordinary must not match special tokens: '<' is unknown here")
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    hidden_cases(check_split, {
        "a text that is one special token": ("<s>", ["<s>"], [("<s>", True)]),
        "a token that starts another": ("a<s>", ["<s>", "<"], [("a", False), ("<s>", True)]),
        "a token made of regex symbols": ("x.*y", [".*"], [("x", False), (".*", True),
                                                           ("y", False)]),
        "a token that never occurs": ("plain text", ["<s>"], [("plain text", False)]),
    })
    hidden_cases(check_specials, {
        "two special tokens": ("xy<|eot|>zz<|sep|>", ["<|eot|>", "<|sep|>"], "zx<|sep|>y<|eot|>",
                               [2, 0, 4, 1, 3]),
        "special tokens side by side": ("ab", ["[A]", "[B]"], "[B][A]ab[B]", [3, 2, 0, 1, 3]),
    })
    ### END HIDDEN TESTS


test_unit_special_tokens_char()


# %% [markdown]
# ## Part 4: bytes, pairs and merges
#
# **UTF-8.** Every string can be written as bytes, numbers from 0 to 255. UTF-8 uses one
# byte for an ASCII character, two for most accented Latin letters, three for most Chinese
# and Japanese characters, four for emoji:
#
# ```
# "hé中😀".encode("utf-8")
#   h    é         中            😀
#   104  195 169   228 184 173   240 159 152 128      list(...) gives these 10 numbers
# ```
#
# A tokenizer whose first 256 ids are the 256 byte values can encode **any** string, and
# its round trip is exact by construction: `bytes(ids).decode("utf-8") == text`. The price
# is length: one id per byte is even longer than one per character. **Byte-pair encoding**
# (BPE) shortens it. It was a data-compression method (Philip Gage, 1994) before Sennrich
# and colleagues used it for translation (2016) and GPT-2 applied it to bytes (2019):
#
# 1. count every pair of adjacent ids in the training text;
# 2. take the most frequent pair and give it a new id (256, then 257, ...);
# 3. replace every occurrence of the pair by the new id, left to right; repeat.
#
# **By hand**, on `"aaabdaaabac"` (a=97, b=98, c=99, d=100):
#
# ```
# step  ids                                      most frequent pair          new id
# 0     97 97 97 98 100 97 97 97 98 97 99        (97, 97) "aa", 4 times      256 = "aa"
# 1     256 97 98 100 256 97 98 97 99            (97, 98) "ab", 2 times      257 = "ab"
# 2     256 257 100 256 257 97 99                (256, 257) "aaab", 2 times  258 = "aaab"
# 3     258 100 258 97 99                        every pair once: stop
# ```
#
# Three details decide the answer, so they are rules:
#
# - **Counting.** `97 97 97` holds the pair `(97, 97)` twice (overlapping), so step 0 counts
#   it 4 times, although merging left to right can replace it only once per run: `97 97 97`
#   becomes `256 97`.
# - **Ties.** At step 1, `(97, 98)` and `(256, 97)` both occur twice. Take the most frequent
#   pair and break ties by the **lowest pair**: the smaller first id, then the smaller second
#   id. `(97, 98)` wins over `(256, 97)`. Any fixed rule would do; without one, the merges
#   would depend on the order of a dictionary and could differ between versions of the code.
# - **Stopping.** Merge only pairs that occur at least twice: a pair seen once teaches
#   nothing about text in general. Training may therefore stop before the vocabulary size
#   asked for.
#
# Write `get_pair_counts(ids, counts=None, weight=1)`, which adds `weight` for each adjacent
# pair into `counts` (a new dict if `None`) and returns it, and `merge_pair(ids, pair,
# new_id)`, which returns a new list (it must not change `ids`).

# %% nbgrader={"grade": false, "grade_id": "pairs", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def get_pair_counts(ids, counts=None, weight=1):
    """Add `weight` to counts[(a, b)] for every adjacent pair (a, b) of `ids`.

    >>> get_pair_counts([1, 2, 3, 1, 2])
    {(1, 2): 2, (2, 3): 1, (3, 1): 1}
    >>> get_pair_counts([1, 2], {(1, 2): 3}, weight=10)  # adds to counts it is given
    {(1, 2): 13}
    """
    counts = {} if counts is None else counts
    ### BEGIN SOLUTION
    for pair in zip(ids, ids[1:]):
        counts[pair] = counts.get(pair, 0) + weight
    ### END SOLUTION
    return counts


def merge_pair(ids, pair, new_id):
    """A new list: `ids` with each occurrence of `pair`, left to right, replaced by `new_id`.

    >>> merge_pair([1, 2, 3, 1, 2, 2], (1, 2), 256)
    [256, 3, 256, 2]
    >>> merge_pair([7, 7, 7], (7, 7), 300)  # left to right: the third 7 has no partner
    [300, 7]
    """
    ### BEGIN SOLUTION
    first, second = pair
    out = []
    i, n = 0, len(ids)
    while i < n:
        if ids[i] == first and i + 1 < n and ids[i + 1] == second:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_unit_pairs", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_pairs():
    """Pair counts and merges of the hand-worked 'aaabdaaabac' table."""
    ids = list(b"aaabdaaabac")
    counts = get_pair_counts(ids)
    want = {(97, 97): 4, (97, 98): 2, (98, 100): 1, (100, 97): 1, (98, 97): 1, (97, 99): 1}
    assert counts == want, (
        f"pair counts of 'aaabdaaabac' should be {want}, got {counts}: count every adjacent "
        "pair zip(ids, ids[1:]), overlapping ones too"
    )
    step1 = merge_pair(ids, (97, 97), 256)
    assert step1 == [256, 97, 98, 100, 256, 97, 98, 97, 99], (
        f"merging (97, 97) -> 256 should give [256, 97, 98, 100, 256, 97, 98, 97, 99], got "
        f"{step1}: scan left to right, and after a merge skip both ids of the pair"
    )
    assert ids == list(b"aaabdaaabac"), "merge_pair must not change its input list"
    step2 = merge_pair(step1, (97, 98), 257)
    assert step2 == [256, 257, 100, 256, 257, 97, 99], f"step 2 of the table gave {step2}"
    step3 = merge_pair(step2, (256, 257), 258)
    assert step3 == [258, 100, 258, 97, 99], f"step 3 of the table gave {step3}"
    assert merge_pair([1, 2, 1, 2, 3], (1, 2), 9) == [9, 9, 3], "every occurrence is replaced"
    assert merge_pair([1, 1, 1, 1], (1, 1), 7) == [7, 7], "[1, 1, 1, 1] merges to [7, 7]"
    assert merge_pair([5], (5, 5), 7) == [5] and merge_pair([], (5, 5), 7) == [], (
        "lists shorter than a pair are returned unchanged"
    )
    assert merge_pair([3, 1], (1, 2), 9) == [3, 1], "a first id at the very end has no partner"

    def check_counts(ids, want):
        got = get_pair_counts(ids)
        assert got == want, (
            f"pair counts of {ids} should be {want}, got {got}: count every adjacent pair "
            "zip(ids, ids[1:]), overlapping ones too"
        )

    def check_merge(ids, pair, new_id, want):
        before = list(ids)
        got = merge_pair(ids, pair, new_id)
        assert got == want, (
            f"merging {pair} -> {new_id} in {ids} should give {want}, got {got}: scan left to "
            "right, and after a merge skip both ids of the pair"
        )
        assert ids == before, "merge_pair must not change its input list"

    check_counts([5, 5, 6], {(5, 5): 1, (5, 6): 1})
    check_merge([3, 1, 2], (1, 2), 9, [3, 9])
    counts = get_pair_counts([1, 2, 3], weight=5)
    counts = get_pair_counts([2, 3], counts, weight=2)
    assert counts == {(1, 2): 5, (2, 3): 7}, (
        f"get_pair_counts should add `weight` into the dict it is given, got {counts}"
    )
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    hidden_cases(check_counts, {
        "one id repeated": ([5, 5, 5, 5], {(5, 5): 3}),
        "two ids alternating": ([1, 2, 1, 2, 1], {(1, 2): 2, (2, 1): 2}),
        "a single id": ([42], {}),
    })
    hidden_cases(check_merge, {
        "an odd run of one id": ([2, 2, 2], (2, 2), 9, [9, 2]),
        "a pair at the very end": ([7, 8, 7, 8, 8], (8, 8), 1, [7, 8, 7, 1]),
        "ids above the bytes": ([300, 256, 300, 256], (300, 256), 301, [301, 301]),
        "a pair that does not occur": ([1, 3, 2], (1, 2), 5, [1, 3, 2]),
    })
    ### END HIDDEN TESTS


test_unit_pairs()


# %% [markdown]
# ## Part 5: words first
#
# Before training, cut the text into words, and merge only inside a word. Two reasons:
#
# - **Better tokens.** Without a cut, frequent pairs that straddle words get merged too:
#   `"d."`, `"e t"`, `", and"`. The word `dog` would then be split differently in `dog.`,
#   `dog,` and `dog!`. GPT-2 cut its text with a regular expression for this reason.
# - **Speed.** Text repeats its words: the first 100,000 characters of Tiny Shakespeare
#   split into about 26,000 words, but only about 3,600 distinct ones. Training can work on
#   the distinct words, each with its count, instead of on every byte of the text.
#
# A simple rule, written without regular expressions: a word is a run of letters
# (`str.isalpha`), a run of digits (`str.isdigit`), a run of whitespace (`str.isspace`) or a
# run of any other characters (punctuation, symbols, emoji). One refinement, as in GPT-2:
# when a run of whitespace is followed by a word, its last character, if it is a space,
# moves to the start of that word, so that `" world"` with its space is one token and the
# text needs no separate space tokens. By hand:
#
# ```
# split_words("Hello, world!  It's 2024.\n")
#   -> ["Hello", ",", " world", "!", " ", " It", "'", "s", " 2024", ".", "\n"]
# ```
#
# The two spaces after `!` become `" "` and the start of `" It"`; the newline, not a space,
# stays alone. Joining the words must give the text back exactly, whatever it is.

# %% nbgrader={"grade": false, "grade_id": "split-words", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def _char_class(ch):
    if ch.isalpha():
        return 1
    if ch.isdigit():
        return 2
    if ch.isspace():
        return 3
    return 4


def split_words(text):
    """Runs of letters, digits, whitespace or other symbols; a space joins the next word.

    >>> split_words("Hello, world! 42 times")
    ['Hello', ',', ' world', '!', ' 42', ' times']
    """
    ### BEGIN SOLUTION
    runs = []
    start, previous = 0, None
    for i, ch in enumerate(text):
        kind = _char_class(ch)
        if i and kind != previous:
            runs.append(text[start:i])
            start = i
        previous = kind
    if text:
        runs.append(text[start:])
    words = []
    carry = ""
    for i, run in enumerate(runs):
        run, carry = carry + run, ""
        if run.endswith(" ") and run.isspace() and i + 1 < len(runs):
            run, carry = run[:-1], " "
        if run:
            words.append(run)
    return words
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_unit_split_words", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
def test_unit_split_words():
    """The hand-worked split, and joining the words always gives the text back."""
    got = split_words("Hello, world!  It's 2024.\n")
    want = ["Hello", ",", " world", "!", " ", " It", "'", "s", " 2024", ".", "\n"]
    assert got == want, (
        f"split_words gave {got}, expected {want}"
        + (": a single space before a word belongs to that word (' world'), and a run of "
           "spaces gives only its last space to the next word"
           if " " in got and " world" not in got else "")
    )
    assert split_words("") == [], "the empty text has no words"
    assert split_words("one") == ["one"], "a single word stays whole"
    got = split_words("a \n b")
    assert got == ["a", " \n", " b"], (
        f"split_words('a \\n b') should be ['a', ' \\n', ' b'], got {got}: only a final "
        "space moves to the next word"
    )
    got = split_words("end   ")
    assert got == ["end", "   "], f"trailing spaces have no next word to join, got {got}"

    def check_joined(text, want=None):
        words = split_words(text)
        assert want is None or words == want, f"split_words({text!r}) gave {words}, expected {want}"
        assert "".join(words) == text, (
            f"joining split_words({text!r}) gave {''.join(words)!r}: no character may be "
            "lost or added"
        )
        assert all(words), f"split_words({text!r}) produced an empty word: {words}"

    for text in ("  two  spaces  ", "tab\there", "naïve café", "中文和English混合",
                 "emoji 😀😀!", "x\r\n\r\ny", "___--==", "3.14159 is π"):
        check_joined(text)
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    hidden_cases(check_joined, {
        "two words": ("Hi there", ["Hi", " there"]),
        "two spaces between words": ("a  b", ["a", " ", " b"]),
        "a contraction and a number": ("I'm 42 years", ["I", "'", "m", " 42", " years"]),
        "newlines before a word": ("\n\nend", ["\n\n", "end"]),
        "mixed scripts and marks": ("Ελληνικά, русский; עברית!",),
        "only punctuation and spaces": ("?! ... --",),
    })
    ### END HIDDEN TESTS


test_unit_split_words()


# %% [markdown]
# ## Part 6: the BPE tokenizer
#
# **Training.** Count the words of the training text (`Counter(split_words(piece))` for
# each piece that is not a special token), turn each distinct word into its list of UTF-8
# bytes, and count the pairs inside words, each weighted by its word's count. Then repeat
# the merge step of Part 4 until `vocab_size` is reached or no pair occurs twice.
#
# Recounting every pair after every merge costs a pass over every word, each time. But a
# merge of `(a, b)` changes only the words that contain `(a, b)`, usually a small share of
# them. So keep two tables and **update** them:
#
# - `counts`: pair -> how often it occurs in the corpus;
# - `where`: pair -> the set of (indices of) words that contain it.
#
# For each word in `where[best]`: subtract its pairs from `counts` (times its count),
# merge, add the new word's pairs back and record them in `where`. Delete pairs whose count
# drops to 0. A word may still be listed under a pair it no longer contains; merging it
# then changes nothing, and subtracting and adding back its pairs cancels out. The most
# frequent pair with the tie rule of Part 4 is
# `max(counts, key=lambda p: (counts[p], -p[0], -p[1]))`.
#
# `vocab_size` counts every id: the 256 bytes, the merges, and the special tokens, which
# get the ids after the last merge. GPT-2's 50,257 are 256 bytes, 50,000 merges and one
# `<|endoftext|>`.
#
# **The tokenizer's tables.** `BPETokenizer(merges, special_tokens)` is built from the
# list of merged pairs in the order they were learned: `self.merges` maps each pair to its
# new id (`256 + position`), and `self.vocab` maps every id to its bytes. A new token's
# bytes are its two parts' bytes joined: `vocab[256] = b"aa"`, `vocab[258] = vocab[256] +
# vocab[257] = b"aaab"`. Special tokens' bytes are their UTF-8 encoding.
#
# **Encoding** one word: start from its bytes; look at its adjacent pairs; merge the pair
# that was learned **first** (the lowest new id) everywhere in the word; repeat until no
# adjacent pair is a learned merge. This replays training, so a word is tokenized the same
# way wherever it appears. By hand, with the merges of `"aaabdaaabac"`, the word `"baaab"`:
#
# ```
# 98 97 97 97 98      pairs (98,97) (97,97) (97,97) (97,98): (97,97) is merge 256, the first
# 98 256 97 98        pairs (98,256) (256,97) (97,98): only (97,98) is a merge, 257
# 98 256 257          pair (256,257) is merge 258
# 98 258              one pair, (98,258), not a merge: done    -> "b" + "aaab"
# ```
#
# The order matters when merges compete for the same byte: `"aab"` has the pairs `(97,97)`
# (merge 256) and `(97,98)` (merge 257). `"aa"` was learned first, so the answer is
# `[256, 98]` ("aa" + "b"), not `[97, 257]` ("a" + "ab").
#
# `encode_ordinary` (given) splits the text into words and keeps a **cache** of words
# already encoded: text repeats its words, so most words are encoded once and looked up
# afterwards (the systems analysis measures the difference).
#
# **Decoding** joins the ids' bytes and decodes them with
# `bytes.decode("utf-8", errors="replace")`. For ids made by `encode` the bytes are exactly
# the text's bytes. A language model, though, may produce any sequence of ids, for example
# half of an emoji's four bytes; `errors="replace"` shows an undecodable byte as `'\ufffd'`
# instead of crashing in the middle of generating text. Ids that do not exist raise a
# `ValueError` that names them.
#
# Write the vocabulary tables in `__init__`, the training loop, `_encode_word` and
# `decode`.

# %% nbgrader={"grade": false, "grade_id": "bpe-tokenizer", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
class BPETokenizer(Tokenizer):
    """Byte-level byte-pair encoding: 256 byte ids, learned merges, then special tokens.

    >>> tokenizer = BPETokenizer.train("low lower lowest " * 10, vocab_size=260)
    >>> tokenizer.merges
    {(108, 111): 256, (256, 119): 257, (32, 257): 258, (258, 101): 259}
    >>> ids = tokenizer.encode("slower")
    >>> ids, tokenizer.decode(ids), tokenizer.vocab[259]
    ([115, 257, 101, 114], 'slower', b' lowe')
    """

    kind = "bpe"
    cache_limit = 100_000  # words kept in the encode cache

    def __init__(self, merges=(), special_tokens=()):
        """Tables from the merges, in the order learned: merge k makes id 256 + k."""
        checked = []
        for k, pair in enumerate(merges):
            first, second = pair
            if not all(type(i) is int and 0 <= i < 256 + k for i in (first, second)):
                raise ValueError(
                    f"merge {k} is {pair!r}: both ids must be ints that exist before it, "
                    f"in range(0, {256 + k})"
                )
            checked.append((first, second))
        if len(set(checked)) != len(checked):
            raise ValueError("the same pair is merged twice in merges")
        # Set self.merges (pair -> new id, in order) and self.vocab (id -> bytes).
        ### BEGIN SOLUTION
        self.merges = {pair: 256 + k for k, pair in enumerate(checked)}
        self.vocab = {i: bytes([i]) for i in range(256)}
        for (first, second), new_id in self.merges.items():
            self.vocab[new_id] = self.vocab[first] + self.vocab[second]
        ### END SOLUTION
        self.special_tokens = self._number_special_tokens(special_tokens, len(self.vocab))
        for token, i in self.special_tokens.items():
            self.vocab[i] = token.encode("utf-8")
        self._cache = {}

    @property
    def vocab_size(self):
        return len(self.vocab)

    @classmethod
    def train(cls, text, vocab_size, special_tokens=()):
        """Learn merges from `text` until there are `vocab_size` ids (or no pair repeats)."""
        _require_text(text)
        tokens = cls._number_special_tokens(special_tokens, 0)
        n_merges = vocab_size - 256 - len(tokens)
        if n_merges < 0:
            raise ValueError(
                f"vocab_size={vocab_size} is too small: the 256 byte values and "
                f"{len(tokens)} special token(s) already need {256 + len(tokens)} ids"
            )
        pieces = split_on_special(text, tokens) if tokens else [(text, False)]
        # Learn `merges`, the list of merged pairs in order, from the pieces that are not
        # special tokens (see the markdown above: word counts, `counts`, `where`).
        ### BEGIN SOLUTION
        word_counts = Counter()
        for piece, is_special in pieces:
            if not is_special:
                word_counts.update(split_words(piece))
        words = [list(word.encode("utf-8")) for word in word_counts]
        freqs = list(word_counts.values())
        counts = {}  # pair -> occurrences in the whole text
        where = {}  # pair -> indices of the words that contain it
        for w, ids in enumerate(words):
            get_pair_counts(ids, counts, freqs[w])
            for pair in zip(ids, ids[1:]):
                where.setdefault(pair, set()).add(w)
        merges = []
        for new_id in range(256, 256 + n_merges):
            if not counts:
                break
            best = max(counts, key=lambda p: (counts[p], -p[0], -p[1]))
            if counts[best] < 2:
                break
            merges.append(best)
            for w in where.pop(best):
                old, freq = words[w], freqs[w]
                for pair in zip(old, old[1:]):
                    counts[pair] -= freq
                    if counts[pair] == 0:
                        del counts[pair]
                new = merge_pair(old, best, new_id)
                words[w] = new
                get_pair_counts(new, counts, freq)
                for pair in zip(new, new[1:]):
                    where.setdefault(pair, set()).add(w)
        ### END SOLUTION
        return cls(merges, list(tokens))

    def encode_ordinary(self, text):
        """text -> ids, word by word, with a cache of words already encoded."""
        _require_text(text)
        ids = []
        cache = self._cache
        for word in split_words(text):
            word_ids = cache.get(word)
            if word_ids is None:
                word_ids = self._encode_word(word)
                if len(cache) < self.cache_limit:
                    cache[word] = word_ids
            ids.extend(word_ids)
        return ids

    def _encode_word(self, word):
        """One word -> ids: its UTF-8 bytes, then the merges in the order they were learned."""
        ### BEGIN SOLUTION
        ids = list(word.encode("utf-8"))
        merges = self.merges
        never = len(self.vocab)  # larger than every merge's id
        while len(ids) > 1:
            pair = min(zip(ids, ids[1:]), key=lambda p: merges.get(p, never))
            if pair not in merges:
                break
            ids = merge_pair(ids, pair, merges[pair])
        return ids
        ### END SOLUTION

    def decode(self, ids):
        """ids -> text: their bytes joined, decoded as UTF-8 with errors='replace'."""
        ### BEGIN SOLUTION
        ids = list(ids)
        vocab = self.vocab
        try:
            data = b"".join([vocab[i] for i in ids])
        except (KeyError, TypeError):
            bad = list(dict.fromkeys(i for i in ids if not _is_known(i, vocab)))
            raise ValueError(
                f"cannot decode ids {bad[:20]}: this BPETokenizer has ids 0.."
                f"{self.vocab_size - 1}. Were they made by a different tokenizer?"
            ) from None
        return data.decode("utf-8", errors="replace")
        ### END SOLUTION

    def _state(self):
        return {"merges": [list(pair) for pair in self.merges],
                "special_tokens": list(self.special_tokens)}

    @classmethod
    def _from_state(cls, state):
        return cls([tuple(pair) for pair in state["merges"]], state["special_tokens"])


# %% [markdown]
# ### Tests: training and encoding, by hand
#
# The merges, ids and bytes below are the ones in the tables of Parts 4 and 6.

# %% nbgrader={"grade": true, "grade_id": "test_unit_bpe_train", "locked": true, "points": 6, "schema_version": 3, "solution": false, "task": false}
def test_unit_bpe_train():
    """Training on 'aaabdaaabac' learns the three merges of the hand-worked table."""
    tok = BPETokenizer.train("aaabdaaabac", vocab_size=300)
    merges = list(tok.merges)
    want = [(97, 97), (97, 98), (256, 257)]
    assert merges[:1] == want[:1], (
        f"the first merge should be (97, 97) 'aa', which occurs 4 times, got {merges[:1]}"
    )
    assert merges[:2] == want[:2], (
        f"the second merge should be (97, 98) 'ab': it ties with (256, 97) at 2 occurrences "
        f"and ties go to the lowest pair; got {merges[:2]}. Use "
        "max(counts, key=lambda p: (counts[p], -p[0], -p[1]))"
    )
    assert merges == want, (
        f"the merges should be {want}, got {merges}: after the third, every pair occurs once "
        "and training stops (merge only pairs that occur at least twice)"
    )
    assert tok.merges == {(97, 97): 256, (97, 98): 257, (256, 257): 258}, (
        f"merge k makes id 256 + k, got {tok.merges}"
    )
    assert tok.vocab[256] == b"aa" and tok.vocab[257] == b"ab" and tok.vocab[258] == b"aaab", (
        f"vocab should hold each token's bytes: 256 b'aa', 257 b'ab', 258 b'aaab', got "
        f"{[tok.vocab.get(i) for i in (256, 257, 258)]}: join the bytes of the pair's two ids"
    )
    assert tok.vocab[97] == b"a" and len(tok.vocab) == 259, "ids 0..255 are the single bytes"
    assert tok.vocab_size == 259, (
        f"vocab_size should be 259 (asked for 300, but training stopped early), got "
        f"{tok.vocab_size}"
    )
    two = BPETokenizer.train("aaabdaaabac", vocab_size=258)
    assert list(two.merges) == want[:2] and two.vocab_size == 258, (
        f"vocab_size=258 leaves room for exactly 2 merges, got {list(two.merges)}"
    )

    def check_merges(text, vocab_size, want):
        got = list(BPETokenizer.train(text, vocab_size=vocab_size).merges)
        assert got == want, (
            f"training on {text!r} with vocab_size={vocab_size} should learn {want}, got {got}: "
            "count pairs inside words, weighted by how often each word occurs; merge the most "
            "frequent (ties to the lowest pair) while it occurs at least twice"
        )

    check_merges("aaabdaaabac", 257, want[:1])
    words = BPETokenizer.train("ab ab ab cd", vocab_size=260)
    assert list(words.merges) == [(97, 98), (32, 256)], (
        f"'ab ab ab cd' splits into 'ab', ' ab', ' ab', ' cd': (97, 98) occurs 3 times, then "
        f"(32, 256) ' ab' twice; got {list(words.merges)}. Count pairs inside words only, "
        "each word weighted by how often it occurs"
    )
    try:
        BPETokenizer.train("abc", vocab_size=100)
    except ValueError:
        pass
    else:
        raise AssertionError("vocab_size=100 < 256 must raise ValueError")
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    hidden_cases(check_merges, {
        "one word with a repeated pair": ("abab ab", 300, [(97, 98)]),
        "one letter repeated": ("aaaa", 300, [(97, 97)]),
        "ties broken by the lowest pair": ("xyxyxy zzz zzz", 300, [
            (122, 122), (120, 121), (32, 256), (257, 257), (258, 122)]),
        "a vocabulary that stops early": ("hello hello help", 260, [
            (101, 108), (104, 256), (32, 257), (108, 111)]),
        "a text with nothing to merge": ("abc def", 300, []),
    })
    ### END HIDDEN TESTS


test_unit_bpe_train()


# %% nbgrader={"grade": true, "grade_id": "test_unit_bpe_encode", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def test_unit_bpe_encode():
    """Encoding replays the merges in the order learned: the hand-worked traces."""

    def check_encoded(corpus, vocab_size, text, want):
        got = BPETokenizer.train(corpus, vocab_size=vocab_size).encode(text)
        assert got == want, (
            f"encode({text!r}) after training on {corpus!r} should be {want}, got {got}: at each "
            "step merge the adjacent pair with the LOWEST merge id (learned first)"
        )

    check_encoded("aaabdaaabac", 259, "aaab", [258])
    tok = BPETokenizer.train("aaabdaaabac", vocab_size=259)
    got = tok.encode("aaabdaaabac")
    assert got == [258, 100, 258, 97, 99], (
        f"encode('aaabdaaabac') should be [258, 100, 258, 97, 99] (the last row of the "
        f"training table), got {got}"
    )
    got = tok.encode("baaab")
    assert got == [98, 258], (
        f"encode('baaab') should be [98, 258] ('b' + 'aaab'), got {got}: at each step merge "
        "the adjacent pair with the LOWEST merge id (learned first), not the most frequent"
    )
    got = tok.encode("aab")
    assert got == [256, 98], (
        f"encode('aab') should be [256, 98] ('aa' + 'b'): (97, 97) was merged before (97, 98), "
        f"so it goes first; got {got}. Pick the pair with the lowest merge id each time"
    )
    assert tok.encode("aaaa") == [256, 256], f"'aaaa' -> [256, 256], got {tok.encode('aaaa')}"
    assert tok.encode("abab") == [257, 257], f"'abab' -> [257, 257], got {tok.encode('abab')}"
    assert tok.encode("xyz") == [120, 121, 122], "text without merges is its bytes"
    assert tok.encode("") == [], "the empty text encodes to []"
    assert all(type(i) is int for i in tok.encode("aaab a")), "ids should be Python ints"
    assert tok.decode([258, 100, 258, 97, 99]) == "aaabdaaabac", (
        f"decode([258, 100, 258, 97, 99]) gave {tok.decode([258, 100, 258, 97, 99])!r}"
    )
    assert tok.decode([98, 258]) == "baaab", "decode joins the tokens' bytes"
    try:
        tok.decode([97, 259])
    except ValueError as error:
        assert "259" in str(error), f"decode's error should name the id 259: {error}"
    else:
        raise AssertionError("decode([97, 259]) must raise ValueError: the ids run 0..258")
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    hidden_cases(check_encoded, {
        "two merged words": ("aaabdaaabac", 259, "aaabaaab", [258, 258]),
        "a pair the merges never made": ("aaabdaaabac", 259, "ba", [98, 97]),
        "a run of one letter after another": ("aaabdaaabac", 259, "caaaa", [99, 256, 256]),
        "words of another corpus": ("hello hello help", 260, "hello help", [257, 259, 258, 112]),
        "a word cut short": ("hello hello help", 260, "he", [104, 101]),
    })
    ### END HIDDEN TESTS


test_unit_bpe_encode()


# %% nbgrader={"grade": true, "grade_id": "test_unit_bpe_roundtrip", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def test_unit_bpe_roundtrip():
    """Any text, seen in training or not, comes back exactly; bad bytes become U+FFFD."""
    corpus = ("the cat sat on the mat. the cat ate the rat; the rat ran. "
              "then the cat sat on the rat's mat.\n") * 3
    tok = BPETokenizer.train(corpus, vocab_size=300)
    assert tok.vocab_size > 256, "training on a repetitive corpus should learn some merges"
    encoded = tok.encode(corpus)
    assert len(encoded) < len(corpus.encode("utf-8")) // 2, (
        f"the training text should shrink to under half its {len(corpus.encode())} bytes, "
        f"got {len(encoded)} tokens: are the merges applied?"
    )
    samples = ["", " ", "   \n\n\t  ", "the cat", "The Cat!", "naïve café, déjà vu",
               "日本語のテキスト", "emoji 😀👍🏽 and 🇫🇷", "tab\tand\r\nnewlines",
               "zebra quokka xylophone", "a\u0301 combining", "\x00\x7f control", "1234567890"]
    for text in samples:
        ids = tok.encode(text)
        assert all(0 <= i < tok.vocab_size for i in ids), f"encode({text!r}) gave ids out of range"
        back = tok.decode(ids)
        assert back == text, (
            f"round trip of {text!r} gave {back!r}: encode the UTF-8 bytes of every word and "
            "decode the joined bytes of all ids"
        )

    def check_round_trip(corpus, vocab_size, text):
        trained = BPETokenizer.train(corpus, vocab_size=vocab_size)
        ids = trained.encode(text)
        assert all(0 <= i < trained.vocab_size for i in ids), f"encode({text!r}) left the range"
        assert trained.decode(ids) == text, (
            f"round trip of {text!r} gave {trained.decode(ids)!r}: encode the UTF-8 bytes of "
            "every word and decode the joined bytes of all ids"
        )

    check_round_trip(corpus, 300, "the rat")
    half = list("😀".encode())[:2]
    try:
        got = tok.decode(half)
    except UnicodeDecodeError:
        raise AssertionError(
            "decoding half of an emoji's bytes raised UnicodeDecodeError: use "
            "bytes.decode('utf-8', errors='replace')"
        ) from None
    assert "\ufffd" in got, f"invalid UTF-8 should decode to U+FFFD, got {got!r}"
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    greek = "αβγ αβγ αβγδ " * 5
    hidden_cases(check_round_trip, {
        "a corpus of two-byte letters": (greek, 280, "γαβ δδ αβγαβγ"),
        "text unlike the corpus": (greek, 280, "plain ASCII, then 🙂 and ÿ"),
        "a long repeated text": (corpus, 300, corpus * 4),
        "whitespace only": (greek, 280, " \t\n \r\n "),
        "no merges at all": ("abc", 256, "any text at all: ünïcödé"),
    })
    ### END HIDDEN TESTS


test_unit_bpe_roundtrip()


# %% nbgrader={"grade": true, "grade_id": "test_unit_bpe_special_tokens", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_bpe_special_tokens():
    """Special tokens get the ids after the merges, are never merged, and stay whole."""
    eot = "<|endoftext|>"
    corpus = f"aaabdaaabac{eot}aaabdaaabac{eot}"
    tok = BPETokenizer.train(corpus, vocab_size=300, special_tokens=[eot])
    leaked = [bytes(tok.vocab[i]) for i in tok.merges.values() if b"<|" in bytes(tok.vocab[i])]
    assert not leaked, (
        f"no merge should contain part of the special token, but merges made {leaked[:3]}: "
        "train only on the pieces between special tokens (split_on_special, skip the "
        "special pieces)"
    )
    n = 256 + len(tok.merges)
    assert tok.special_tokens == {eot: n} and tok.vocab_size == n + 1, (
        f"the special token should get id {n}, right after the merges, and vocab_size "
        f"should be {n + 1}; got {tok.special_tokens} and {tok.vocab_size}"
    )
    ids = tok.encode(f"aaab{eot}ab")
    assert ids == [258, n, 257], f"encode('aaab{eot}ab') should be [258, {n}, 257], got {ids}"
    assert tok.decode(ids) == f"aaab{eot}ab", f"decode gave {tok.decode(ids)!r}"
    plain = tok.encode_ordinary(eot)
    assert n not in plain and tok.decode(plain) == eot, (
        "encode_ordinary treats the special token's text as ordinary bytes"
    )

    def check_specials(corpus, vocab_size, specials, want_ids, text, want):
        trained = BPETokenizer.train(corpus, vocab_size=vocab_size, special_tokens=specials)
        assert trained.special_tokens == want_ids, (
            f"the special tokens should get {want_ids}, the ids after the merges, got "
            f"{trained.special_tokens}"
        )
        got = trained.encode(text)
        assert got == want and trained.decode(got) == text, (
            f"encode({text!r}) should be {want}, got {got}"
        )

    check_specials(corpus, 300, [eot], {eot: n}, "ab", [257])
    capped = BPETokenizer.train(corpus, vocab_size=258, special_tokens=[eot])
    assert len(capped.merges) == 1 and capped.vocab_size == 258, (
        f"vocab_size counts the special tokens: 258 = 256 bytes + 1 merge + 1 special, got "
        f"{len(capped.merges)} merges and vocab_size {capped.vocab_size}"
    )
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    hidden_cases(check_specials, {
        "two special tokens": ("abcabc<|x|>abcabc<|x|>abcabc", 300, ["<|x|>", "<|y|>"],
                               {"<|x|>": 259, "<|y|>": 260}, "abc<|y|>abc<|x|>",
                               [257, 260, 257, 259]),
        "room for the special token only": ("zzzz", 257, ["<e>"], {"<e>": 256}, "z<e>z",
                                            [122, 256, 122]),
    })
    ### END HIDDEN TESTS


test_unit_bpe_special_tokens()


# %% [markdown]
# ## Part 7: a tokenizer on disk, end to end
#
# Nothing new to write: `save` and `load` from Part 1 now work for both tokenizers. The file
# of a BPE tokenizer holds its merges in order, the only thing training learned; the vocab
# is rebuilt from them. This test saves both kinds, loads them back, and checks that a file
# loaded as the wrong kind of tokenizer is refused with a message that says which it is.

# %% nbgrader={"grade": true, "grade_id": "test_unit_save_load", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def test_unit_save_load():
    """Both tokenizers survive save/load exactly; the wrong type is refused by name."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        corpus = "To be, or not to be: that is the question. To sleep, perchance to dream. " * 4
        bpe = BPETokenizer.train(corpus, vocab_size=320, special_tokens=["<|endoftext|>"])
        char = CharTokenizer.train(corpus, special_tokens=["<|endoftext|>"])
        bpe.save(folder / "bpe.json")
        char.save(folder / "char.json")
        sample = "to be or not<|endoftext|>To dream"
        cases = [(BPETokenizer, "bpe.json", bpe), (CharTokenizer, "char.json", char),
                 (Tokenizer, "bpe.json", bpe), (Tokenizer, "char.json", char)]

        def check_reloaded(cls, name, original, sample):
            original.save(folder / name)
            loaded = cls.load(folder / name)
            assert type(loaded) is type(original), (
                f"{cls.__name__}.load({name}) gave a {type(loaded).__name__}, expected "
                f"{type(original).__name__}: pick the class from the file's \"type\""
            )
            assert loaded.encode(sample) == original.encode(sample), (
                f"{cls.__name__}.load({name}) encodes differently from the saved tokenizer"
            )
            assert loaded.vocab_size == original.vocab_size, f"vocab_size changed in {name}"

        for cls, name, original in cases:
            check_reloaded(cls, name, original, sample)
        data = json.loads((folder / "bpe.json").read_text(encoding="utf-8"))
        assert data["format"] == "tinytorch-tokenizer" and data["type"] == "bpe", (
            f"the BPE file should say format 'tinytorch-tokenizer' and type 'bpe', got "
            f"{data.get('format')!r}, {data.get('type')!r}"
        )
        assert data["merges"][0] == list(list(bpe.merges)[0]), (
            "the file should hold the merges in the order they were learned"
        )
        try:
            wrong = CharTokenizer.load(folder / "bpe.json")
        except TokenizerFileError as error:
            assert "bpe" in str(error) and "BPETokenizer" in str(error), (
                f"loading a BPE file as CharTokenizer should say it holds a 'bpe' tokenizer and "
                f"to use BPETokenizer.load: {error}"
            )
        else:
            raise AssertionError(
                "CharTokenizer.load of a BPE file must raise TokenizerFileError, but it "
                f"returned a {type(wrong).__name__}: in load, when cls is not Tokenizer, "
                "compare the file's type with cls and refuse another kind"
            )
        data["merges"][0] = [97, 400]
        (folder / "damaged.json").write_text(json.dumps(data), encoding="utf-8")
        try:
            BPETokenizer.load(folder / "damaged.json")
        except TokenizerFileError as error:
            assert "damaged.json" in str(error), f"the error should name the file: {error}"
        else:
            raise AssertionError(
                "a merge that uses id 400 before it exists must make load raise TokenizerFileError"
            )
        ### BEGIN HIDDEN TESTS
        from tinytorch.core.tensor import hidden_cases

        lines = "one two three two one\n" * 6
        hidden_cases(check_reloaded, {
            "a byte-level tokenizer without merges": (
                BPETokenizer, "none.json", BPETokenizer.train("xyz", vocab_size=256), "any text"),
            "two special tokens, loaded by the base class": (
                Tokenizer, "two.json", BPETokenizer.train(lines, 290, ["<a>", "<b>"]),
                "one<b>two<a>"),
            "characters outside the basic plane": (
                CharTokenizer, "emoji.json", CharTokenizer.train("😀a😎b"), "b😎a😀"),
        })
        ### END HIDDEN TESTS


test_unit_save_load()


# %% [markdown]
# See what a BPE tokenizer learns from 40,000 characters of Shakespeare (or from the short
# sample below, if the course's copy of Tiny Shakespeare is not found). The first merges
# join a space to the next letter and frequent letter pairs; a few hundred merges later,
# common words with their leading space (`" the"`, `" more"`) are single tokens.

# %% nbgrader={"grade": false, "grade_id": "demo-bpe", "locked": false, "schema_version": 3, "solution": false, "task": false}
import time

SAMPLE = """First Citizen:
Before we proceed any further, hear me speak.

All:
Speak, speak.

First Citizen:
You are all resolved rather to die than to famish?

All:
Resolved. resolved.
"""

if shakespeare_path is not None:
    text = shakespeare
else:
    text = SAMPLE * 20
    print("Tiny Shakespeare not found: these figures use the short sample, repeated.")
train_text = text[:40_000]
start = time.perf_counter()
bpe = BPETokenizer.train(train_text, vocab_size=512)
train_seconds = time.perf_counter() - start
print(f"trained on {len(train_text):,} characters: {bpe.vocab_size} ids in {train_seconds:.2f} s")
print("first merges:", [bpe.decode([i]) for i in list(bpe.merges.values())[:10]])
print("last merges: ", [bpe.decode([i]) for i in list(bpe.merges.values())[-10:]])
print("tokens:", [bpe.decode([i]) for i in bpe.encode("First Citizen:\nBefore we proceed")])

# %% [markdown]
# ## Part 8: reading a Hugging Face `tokenizer.json`
#
# The BPE tokenizer you trained numbers its tokens your way: bytes are ids 0-255 and merge
# `k` is id `256 + k`. The open models you will run in module 18 (GPT-2, Qwen2, Llama 3)
# come with the tokenizer they were trained with, in one file, `tokenizer.json`, written by
# Hugging Face's `tokenizers` library. A model only makes sense with *its* tokenizer: the
# same text under another numbering is a different sequence of ids. So this part reads that
# file and encodes and decodes exactly as `tokenizers` does, id for id. Nothing here is a
# new idea; every piece is a variation of Parts 3-6.
#
# **What the file holds** (GPT-2's, cut down):
#
# ```json
# {"added_tokens": [{"id": 50256, "content": "<|endoftext|>", "special": true,
#                    "lstrip": false, "rstrip": false, "normalized": true, ...}],
#  "normalizer": null,
#  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
#  "post_processor": {"type": "ByteLevel", ...},
#  "decoder": {"type": "ByteLevel", ...},
#  "model": {"type": "BPE", "vocab": {"!": 0, "\"": 1, ..., "Ġthe": 262, ...},
#            "merges": ["Ġ t", "Ġ a", "h e", ...]}}
# ```
#
# - `model.vocab` maps each token, written as a **string**, to its id. Ids are in any order.
# - `model.merges` lists the merges, most important first: a merge's **rank** is its
#   position. Files from older libraries write a merge as `"Ġ t"`, newer ones as
#   `["Ġ", "t"]`; both mean: the tokens `Ġ` and `t` join into `Ġt`.
# - `added_tokens` are tokens matched whole before anything else (Part 3's special
#   tokens). `special: true` marks control tokens (`<|endoftext|>`, `<|im_start|>`) that
#   decoding may skip; `lstrip`/`rstrip` let a token swallow the whitespace beside it.
# - `normalizer` rewrites the text first: Qwen2 applies Unicode NFC, so `e` followed by a
#   combining accent becomes the single character `é`.
# - `pre_tokenizer` cuts the text into pieces, as your `split_words` did, and `ByteLevel`
#   turns each piece's UTF-8 bytes into characters (below). GPT-2 cuts with the regular
#   expression `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`:
#   English contractions, a run of letters with one optional space before it, a run of
#   digits, a run of other symbols, whitespace. `\p{L}` is "any letter in any script", and
#   Python's `re` cannot say that; the `regex` package can. Qwen2 and Llama 3 put their own
#   pattern in a `Split` step (digits one at a time, or up to three), then a `ByteLevel`
#   that only maps bytes.
# - `post_processor` may add tokens around the text: Llama 3's puts `<|begin_of_text|>`
#   first.
#
# **Why tokens are strings of odd characters.** The vocabulary is JSON, and JSON holds
# text, not bytes; but a byte-level token may be half a UTF-8 character, or a control byte
# like a newline. GPT-2's trick is a table that gives **each of the 256 bytes one printable
# character**: the 188 bytes that are already printable characters of Latin-1 (`!` to `~`,
# `¡` to `¬`, `®` to `ÿ`) stand for themselves; the other 68 (the control bytes, the
# space, `0x7F`-`0xA0` and the soft hyphen `0xAD`) get the characters `chr(256)`,
# `chr(257)`, ... in byte order. So byte 0 is `Ā`, the newline (10) `Ċ` and the space (32)
# `Ġ`: `"Ġthe"` is the token " the". Write `bytes_to_unicode()`.

# %% nbgrader={"grade": false, "grade_id": "bytes-to-unicode", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
def bytes_to_unicode():
    """{byte: character}: GPT-2's table that gives each of the 256 bytes a printable character.

    >>> table = bytes_to_unicode()
    >>> len(table), table[ord("a")], table[ord(" ")], table[10]  # 10: newline
    (256, 'a', 'Ġ', 'Ċ')
    """
    ### BEGIN SOLUTION
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)  # the next unused character after the Latin-1 block
            extra += 1
    return dict(sorted(table.items()))
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_unit_bytes_to_unicode", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
def test_unit_bytes_to_unicode():
    """256 distinct printable characters; printable bytes keep theirs; space is 'Ġ'."""
    table = bytes_to_unicode()
    assert sorted(table) == list(range(256)), (
        f"the table should have the 256 bytes 0..255 as keys, got {len(table)} keys"
    )
    shared = {}
    for b, ch in table.items():
        shared.setdefault(ch, []).append(b)
    shared = {ch: bs for ch, bs in shared.items() if len(bs) > 1}
    assert not shared, (
        "two bytes share a character: the table must be one-to-one, or decoding is ambiguous; "
        + ", ".join(f"bytes {bs} all map to {ch!r}" for ch, bs in list(shared.items())[:2])
        + ". The bytes that need a new character get chr(256), chr(257), ..., never a "
        "character that a printable byte already has"
    )
    assert table[ord("a")] == "a" and table[ord("~")] == "~" and table[0xE9] == "é", (
        f"printable bytes keep their own character: got {table[ord('a')]!r} for 'a', "
        f"{table[0xE9]!r} for 0xE9"
    )
    assert table[ord(" ")] == "Ġ" and table[ord("\n")] == "Ċ" and table[0] == "Ā", (
        f"the other bytes get chr(256), chr(257), ... in byte order: 0 -> 'Ā', 10 -> 'Ċ', "
        f"32 -> 'Ġ'; got {table[0]!r}, {table[10]!r}, {table[32]!r}"
    )
    assert table[0xAD] == chr(256 + 33 + 34), (
        f"byte 0xAD (a soft hyphen, invisible) is the last byte that needs a new character, "
        f"chr({256 + 33 + 34}); got {table[0xAD]!r}"
    )

    def check_mapped(byte, char):
        assert table[byte] == char, (
            f"byte {byte} should map to {char!r}, got {table[byte]!r}: printable bytes (33..126, "
            "161..172, 174..255) keep their character, the others get chr(256), chr(257), ... "
            "in byte order"
        )

    check_mapped(ord("A"), "A")
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    hidden_cases(check_mapped, {
        "the delete byte": (127, chr(256 + 33)),
        "the no-break space": (160, chr(256 + 33 + 33)),
        "the first printable byte after it": (161, "¡"),
        "the last byte": (255, "ÿ"),
        "the first printable byte": (33, "!"),
        "a control byte": (31, chr(256 + 31)),
    })
    ### END HIDDEN TESTS


test_unit_bytes_to_unicode()


# %% [markdown]
# ### Encoding and decoding as `tokenizers` does
#
# The pipeline of `encode(text)`, each step given below except the merge loop:
#
# 1. Cut the text around the added tokens, leftmost and longest match first (Part 3), with
#    each token's `lstrip`, `rstrip` and `single_word` rules. Each added token is its id.
#    `tokenizers` states these rules with Rust's regex classes, and the given code follows
#    them exactly: a `single_word` match with a word character (`\w`: a letter, a combining
#    mark, a decimal digit, `_`, a zero-width joiner) just before or after it is rejected,
#    and the search goes on after the rejected text; `lstrip`/`rstrip` swallow Unicode
#    whitespace (`\s`). Python's `str.isalnum` and `str.isspace` draw both lines elsewhere
#    (`"²"` is alphanumeric to Python, `"\x1c"` is a space), and one such character changes
#    the ids.
# 2. Normalize the rest (Unicode `NFC` and friends, `unicodedata.normalize`).
# 3. Pre-tokenize: run the steps in order; `Split` cuts each piece at the pattern's matches,
#    keeping them ("Isolated"); `ByteLevel` adds a space in front if `add_prefix_space`,
#    cuts with GPT-2's pattern if `use_regex`, and maps every byte to its character.
# 4. BPE on each piece, with a cache: the piece's characters are the first symbols; merge
#    the adjacent pair with the **lowest rank**, everywhere in the piece, left to right;
#    repeat until no adjacent pair is a merge. The tokens' ids come from `vocab`. (Llama 3
#    sets `ignore_merges`: a piece that is already a token is taken whole.)
# 5. Add the post-processor's tokens (`add_special_tokens=True`, the default of
#    `tokenizers`).
#
# This is your `_encode_word` with two changes: the symbols are strings and a pair's
# priority is its rank in the file instead of its new id. The order of merges decides the
# result: with merges `e l` (rank 0) and `h e` (rank 1), `"hel"` is `h el`, not `he l`.
#
# `decode(ids, skip_special_tokens=True)` (the defaults of `tokenizers`) looks each id up
# (an added token's id gives its content, normalized if the token is), drops special
# tokens if asked, and undoes the byte table: a token whose characters are all in the table
# becomes those bytes; a token with a character outside it (an added token such as
# `<|思考|>`) contributes its own UTF-8 bytes. The bytes are decoded with
# `errors="replace"`, as in Part 6.
#
# Write the merge loop `_bpe` and the byte part of `decode`. The rest is given: it is
# bookkeeping over the file's options, and the tests compare it with `tokenizers` itself on
# GPT-2-, Qwen2- and Llama-3-style files.

# %% nbgrader={"grade": false, "grade_id": "hf-pipeline", "locked": true, "schema_version": 3, "solution": false, "task": false}
#| export
GPT2_SPLIT_PATTERN = (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+"
                      r"|\s+(?!\S)|\s+")  # what ByteLevel(use_regex=True) splits with
_NORMAL_FORMS = ("NFC", "NFD", "NFKC", "NFKD")


def _hf_error(path, problem):
    return TokenizerFileError(f"{path}: {problem}")


def _normalizer_steps(spec, path):
    """The Unicode normal forms a tokenizer.json normalizer applies, in order."""
    if spec is None:
        return []
    kind = spec.get("type")
    if kind in _NORMAL_FORMS:
        return [kind]
    if kind == "Sequence":
        return [form for step in spec["normalizers"] for form in _normalizer_steps(step, path)]
    raise _hf_error(path, f"normalizer {kind!r} is not supported (only {_NORMAL_FORMS} and "
                          "Sequence of them): this is not a byte-level BPE tokenizer")


def _pre_tokenizer_steps(spec, path):
    """[("split", pattern, behavior) or ("bytelevel", pattern or None, add_prefix_space)]."""
    if spec is None:
        raise _hf_error(path, "there is no pre_tokenizer: a byte-level BPE tokenizer has ByteLevel")
    kind = spec.get("type")
    if kind == "Sequence":
        return [s for step in spec["pretokenizers"] for s in _pre_tokenizer_steps(step, path)]
    if kind == "ByteLevel":
        pattern = regex.compile(GPT2_SPLIT_PATTERN) if spec.get("use_regex", True) else None
        return [("bytelevel", pattern, bool(spec.get("add_prefix_space", False)))]
    if kind == "Split":
        source = spec["pattern"]
        text = source["Regex"] if "Regex" in source else regex.escape(source["String"])
        behavior = spec.get("behavior", "Isolated")
        if behavior not in ("Isolated", "Removed") or spec.get("invert", False):
            raise _hf_error(path, f"Split with behavior {behavior!r}, invert "
                                  f"{spec.get('invert')!r} is not supported (only Isolated and "
                                  "Removed, not inverted)")
        return [("split", regex.compile(text), behavior)]
    raise _hf_error(path, f"pre_tokenizer {kind!r} is not supported (ByteLevel, Split and "
                          "Sequence are): this is not a byte-level BPE tokenizer")


def _template(spec, path):
    """(ids before, ids after) the text that the post-processor adds, for one sequence."""
    if spec is None or spec.get("type") == "ByteLevel":
        return [], []
    if spec.get("type") == "Sequence":
        before, after = [], []
        for step in spec["processors"]:
            b, a = _template(step, path)
            before, after = before + b, a + after
        return before, after
    if spec.get("type") == "TemplateProcessing":
        before, after, seen = [], [], False
        for piece in spec["single"]:
            if "Sequence" in piece:
                seen = True
            else:
                name = piece["SpecialToken"]["id"]
                (after if seen else before).extend(spec["special_tokens"][name]["ids"])
        return before, after
    raise _hf_error(path, f"post_processor {spec.get('type')!r} is not supported "
                          "(ByteLevel, TemplateProcessing and Sequence are)")


def split_pieces(text, pattern, behavior="Isolated"):
    """Cut text at the pattern's matches: matches and the text between them, in order
    (with "Removed", the matches are dropped).

    >>> pattern = regex.compile(GPT2_SPLIT_PATTERN)
    >>> split_pieces("I'm here  in 2024!", pattern)
    ['I', "'m", ' here', ' ', ' in', ' 2024', '!']
    >>> split_pieces("a-b-c", regex.compile("-"), behavior="Removed")
    ['a', 'b', 'c']
    """
    pieces, last = [], 0
    for match in pattern.finditer(text):
        start, end = match.span()
        if start == end:
            continue
        if start > last:
            pieces.append(text[last:start])
        if behavior == "Isolated":
            pieces.append(text[start:end])
        last = end
    if last < len(text):
        pieces.append(text[last:])
    return pieces


def _match_added(text, tokens):
    """[(piece, added token or None)]: leftmost-longest matches of the added tokens, with each
    token's lstrip/rstrip (swallow the whitespace beside it) and single_word rules."""
    if not tokens or not text:
        return [(text, None)] if text else []
    by_content = {t["content"]: t for t in tokens}
    pattern = regex.compile("|".join(regex.escape(c)
                                     for c in sorted(by_content, key=len, reverse=True)))
    out, last = [], 0
    # Each search starts where the previous match ended, accepted or not, and before the
    # whitespace an rstrip swallowed: tokenizers scans the text once, left to right.
    for match in pattern.finditer(text):
        token = by_content[match.group()]
        start, end = match.span()
        if token.get("single_word") and (
                (start > 0 and _is_word_char(text[start - 1]))
                or (end < len(text) and _is_word_char(text[end]))):
            continue  # inside a word: rejected, and the search goes on after it
        if token.get("lstrip"):
            while start > last and _is_space(text[start - 1]):
                start -= 1
        if token.get("rstrip"):
            while end < len(text) and _is_space(text[end]):
                end += 1
        if start > last:
            out.append((text[last:start], None))
        out.append((text[start:end], token))
        last = end
    if last < len(text):
        out.append((text[last:], None))
    return out


# What `tokenizers` calls a word character and a space: the regex classes \w and \s of Rust's
# `regex` crate. \w is wider than str.isalnum() + "_" (combining marks, the zero-width joiner)
# and narrower (no "²" or "½": they are numbers, not decimal digits); str.isspace() also
# takes the control characters \x1c-\x1f, which are not Unicode White_Space.
_WORD_CHAR = regex.compile(r"[\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}]")
_SPACE = regex.compile(r"\p{White_Space}")


def _is_word_char(ch):
    return _WORD_CHAR.match(ch) is not None


def _is_space(ch):
    return _SPACE.match(ch) is not None


# %% nbgrader={"grade": false, "grade_id": "hf-tokenizer", "locked": false, "schema_version": 3, "solution": true, "task": false}
#| export
class ByteLevelBPETokenizer(Tokenizer):
    """A Hugging Face byte-level BPE tokenizer (GPT-2, Qwen2, Llama 3) from its tokenizer.json;
    encodes and decodes as the `tokenizers` package does.

    >>> vocab = {"h": 0, "i": 1, "Ġ": 2, "hi": 3, "<eos>": 4}
    >>> data = {"model": {"type": "BPE", "vocab": vocab, "merges": ["h i"]},
    ...         "added_tokens": [{"id": 4, "content": "<eos>", "special": True}],
    ...         "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False},
    ...         "decoder": {"type": "ByteLevel"}}
    >>> tokenizer = ByteLevelBPETokenizer(data)
    >>> tokenizer.pre_tokenize("hi hi"), tokenizer.encode("hi hi<eos>")
    (['hi', 'Ġhi'], [3, 2, 3, 4])
    >>> tokenizer.decode([3, 2, 3, 4])  # special tokens skipped
    'hi hi'
    >>> tokenizer.decode([3, 4], skip_special_tokens=False)
    'hi<eos>'
    """

    kind = "hf-bytelevel-bpe"
    cache_limit = 100_000

    def __init__(self, data, path="tokenizer.json"):
        """From the parsed JSON of a tokenizer.json (`path` only names it in errors)."""
        model = data.get("model") if isinstance(data, dict) else None
        if not isinstance(model, dict) or model.get("type") != "BPE":
            kind = model.get("type") if isinstance(model, dict) else model
            raise _hf_error(path, f"the model is {kind!r}, not BPE")
        for key in ("continuing_subword_prefix", "end_of_word_suffix"):
            if model.get(key):
                raise _hf_error(path, f"model.{key} is {model[key]!r}: byte-level BPE has none")
        if model.get("byte_fallback") or model.get("dropout"):
            raise _hf_error(path, "byte_fallback and dropout are not supported")
        self.data = data
        self.vocab = dict(model["vocab"])  # token string -> id
        self.ranks = {}  # (left, right) -> rank: lower merges first
        for rank, merge in enumerate(model["merges"]):
            pair = tuple(merge.split(" ")) if isinstance(merge, str) else tuple(merge)
            if len(pair) != 2:
                raise _hf_error(path, f"merge {rank} is {merge!r}, not a pair of tokens")
            self.ranks.setdefault(pair, rank)
        self.ignore_merges = bool(model.get("ignore_merges", False))
        self.added = list(data.get("added_tokens") or [])
        self.special_tokens = {t["content"]: t["id"] for t in self.added if t.get("special")}
        self.normal_forms = _normalizer_steps(data.get("normalizer"), path)
        # Added tokens matched in the raw text, and those matched after normalizing, in their
        # normalized form (as tokenizers does: "cafe" + a combining accent is found as "café")
        self.raw_added = [t for t in self.added
                          if not t.get("normalized", True) or not self.normal_forms]
        self.normalized_added = [dict(t, content=self.normalize(t["content"]))
                                 for t in self.added if t not in self.raw_added]
        self.id_to_token = {i: token for token, i in self.vocab.items()}
        for token in self.raw_added + self.normalized_added:
            self.id_to_token[token["id"]] = token["content"]
        self.steps = _pre_tokenizer_steps(data.get("pre_tokenizer"), path)
        self.prefix_ids, self.suffix_ids = _template(data.get("post_processor"), path)
        decoder = data.get("decoder")
        if decoder is not None and decoder.get("type") != "ByteLevel":
            raise _hf_error(path, f"decoder {decoder.get('type')!r} is not supported (ByteLevel)")
        self.byte_decoder_on = decoder is not None
        self.byte_encoder = bytes_to_unicode()
        self.byte_decoder = {ch: b for b, ch in self.byte_encoder.items()}
        self._cache = {}

    @classmethod
    def from_hf_json(cls, path):
        """Load a tokenizer.json file (or a folder that holds one)."""
        path = Path(path)
        if path.is_dir():
            path = path / "tokenizer.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise _hf_error(path, f"not UTF-8 JSON ({error})") from None
        try:
            return cls(data, path)
        except (KeyError, TypeError, AttributeError) as error:
            raise _hf_error(path, f"not a tokenizer.json of the expected layout "
                                  f"({type(error).__name__}: {error})") from None

    @property
    def vocab_size(self):
        return max(self.id_to_token) + 1 if self.id_to_token else 0

    def token_to_id(self, token):
        for added in self.added:
            if added["content"] == token:
                return added["id"]
        return self.vocab.get(token)

    # ---- encoding: added tokens, normalizer, pre-tokenizer, BPE, post-processor ------
    def encode(self, text, add_special_tokens=True):
        """text -> ids, as tokenizers' Tokenizer.encode(text).ids; `add_special_tokens` adds
        what the post-processor adds (Llama 3's <|begin_of_text|>)."""
        _require_text(text)
        ids = []
        for piece, token in _match_added(text, self.raw_added):
            if token is not None:
                ids.append(token["id"])
                continue
            for inner, token in _match_added(self.normalize(piece), self.normalized_added):
                if token is not None:
                    ids.append(token["id"])
                else:
                    ids.extend(self._encode_normalized(inner))
        if add_special_tokens:
            ids = self.prefix_ids + ids + self.suffix_ids
        return ids

    def encode_ordinary(self, text):
        """text -> ids with added/special tokens treated as ordinary text."""
        _require_text(text)
        return self._encode_normalized(self.normalize(text))

    def normalize(self, text):
        for form in self.normal_forms:
            text = unicodedata.normalize(form, text)
        return text

    def pre_tokenize(self, text):
        """The pieces the BPE model sees, already in byte-level characters."""
        pieces = [text] if text else []
        for kind, pattern, option in self.steps:
            if kind == "split":  # option: the behavior, "Isolated" or "Removed"
                pieces = [p for piece in pieces for p in split_pieces(piece, pattern, option)]
            else:  # ByteLevel: maybe a space in front, maybe GPT-2's split, then bytes -> chars
                out = []
                for piece in pieces:
                    if option and not piece.startswith(" "):  # option: add_prefix_space
                        piece = " " + piece
                    out.extend(split_pieces(piece, pattern) if pattern is not None else [piece])
                pieces = ["".join(self.byte_encoder[b] for b in p.encode("utf-8")) for p in out]
        return pieces

    def _encode_normalized(self, text):
        ids, cache = [], self._cache
        for piece in self.pre_tokenize(text):
            piece_ids = cache.get(piece)
            if piece_ids is None:
                piece_ids = [self.vocab[t] for t in self._bpe(piece)]
                if len(cache) < self.cache_limit:
                    cache[piece] = piece_ids
            ids.extend(piece_ids)
        return ids

    def _bpe(self, piece):
        """One pre-tokenized piece -> its tokens: merge the adjacent pair of lowest rank,
        everywhere, until no adjacent pair is a merge."""
        if self.ignore_merges and piece in self.vocab:
            return [piece]
        unknown = [ch for ch in piece if ch not in self.vocab]
        if unknown:
            raise ValueError(f"the characters {unknown} are not in this tokenizer's vocabulary")
        ### BEGIN SOLUTION
        symbols = list(piece)
        ranks, never = self.ranks, len(self.ranks)
        while len(symbols) > 1:
            pair = min(zip(symbols, symbols[1:]), key=lambda p: ranks.get(p, never))
            if pair not in ranks:
                break
            merged, i = [], 0
            while i < len(symbols):
                if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
                    merged.append(symbols[i] + symbols[i + 1])
                    i += 2
                else:
                    merged.append(symbols[i])
                    i += 1
            symbols = merged
        return symbols
        ### END SOLUTION

    # ---- decoding --------------------------------------------------------------------
    def decode(self, ids, skip_special_tokens=True):
        """ids -> text, as tokenizers' Tokenizer.decode(ids, skip_special_tokens)."""
        ids = list(ids)
        bad = [i for i in ids if not _is_known(i, self.id_to_token)]
        if bad:
            raise ValueError(f"cannot decode ids {bad[:20]}: this tokenizer has ids 0.."
                             f"{self.vocab_size - 1}. Were they made by a different tokenizer?")
        special = set(self.special_tokens.values()) if skip_special_tokens else set()
        tokens = [self.id_to_token[i] for i in ids if i not in special]
        if not self.byte_decoder_on:
            return " ".join(tokens)
        ### BEGIN SOLUTION
        data = bytearray()
        for token in tokens:
            if all(ch in self.byte_decoder for ch in token):
                data.extend(self.byte_decoder[ch] for ch in token)
            else:  # a token that is not byte-level text (an added token): its own bytes
                data.extend(token.encode("utf-8"))
        return data.decode("utf-8", errors="replace")
        ### END SOLUTION

    def _state(self):
        return {"tokenizer_json": self.data}

    @classmethod
    def _from_state(cls, state):
        return cls(state["tokenizer_json"])


def load_hf_tokenizer(path):
    """A Hugging Face byte-level BPE tokenizer from tokenizer.json (a file, or its folder).

    >>> import tempfile
    >>> model = {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}
    >>> data = {"model": model, "pre_tokenizer": {"type": "ByteLevel"},
    ...         "decoder": {"type": "ByteLevel"}}
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     _ = (Path(folder) / "tokenizer.json").write_text(json.dumps(data))
    ...     tokenizer = load_hf_tokenizer(folder)  # the folder, or the file in it
    >>> tokenizer.encode("abba"), tokenizer.vocab_size
    ([2, 1, 0], 3)
    """
    return ByteLevelBPETokenizer.from_hf_json(path)


# %% nbgrader={"grade": true, "grade_id": "test_unit_hf_tokenizer", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
def _tiny_tokenizer_json():
    """A GPT-2-style tokenizer.json, small enough to encode by hand: the 256 byte characters
    (id = byte), five merges and one special token."""
    table = bytes_to_unicode()
    vocab = {table[b]: b for b in range(256)}
    merges = ["e l", "h e", "l l", "Ġ t", ["Ġt", "he"]]  # both spellings of a merge
    for k, merge in enumerate(merges):
        left, right = merge.split(" ") if isinstance(merge, str) else merge
        vocab[left + right] = 256 + k  # el 256, he 257, ll 258, Ġt 259, Ġthe 260
    eot = {"id": 261, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
           "rstrip": False, "normalized": True, "special": True}
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                  "use_regex": True}
    return {"version": "1.0", "added_tokens": [eot], "normalizer": None,
            "pre_tokenizer": byte_level, "post_processor": byte_level, "decoder": byte_level,
            "model": {"type": "BPE", "dropout": None, "unk_token": None,
                      "continuing_subword_prefix": None, "end_of_word_suffix": None,
                      "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                      "merges": merges}}


def test_unit_hf_tokenizer():
    """Hand-worked ids: GPT-2's split, merges by rank, special tokens; decode inverts."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "tokenizer.json"
        path.write_text(json.dumps(_tiny_tokenizer_json()), encoding="utf-8")
        tok = load_hf_tokenizer(folder)
    assert tok.vocab_size == 262, f"vocab_size should be 262 (256 + 5 + 1), got {tok.vocab_size}"
    symbols = tok._bpe("hello")
    unknown = [t for t in symbols if t not in tok.vocab]
    assert symbols == ["h", "el", "l", "o"], (
        f"_bpe('hello') should give the tokens ['h', 'el', 'l', 'o'], got {symbols}"
        + (f": {unknown} are not tokens of the vocabulary; stop as soon as the lowest-rank "
           "adjacent pair has no rank (is not a merge)" if unknown else
           ": merge the pair of lowest rank first ('e l' is rank 0, 'h e' rank 1), not the "
           "leftmost pair")
    )
    got = tok.encode("hello the llama<|endoftext|>")
    want = [104, 256, 108, 111, 260, 32, 258, 97, 109, 97, 261]
    assert got[:4] == want[:4], (
        f"'hello' should be h, el, l, o = {want[:4]}, got {got[:4]}: merge the pair of lowest "
        "rank first ('e l' is rank 0, 'h e' rank 1), not the leftmost pair"
    )
    assert got == want, (
        f"'hello the llama<|endoftext|>' should be {want}, got {got}: pieces 'hello', ' the', "
        "' llama' (the space is 'Ġ'); ' the' merges Ġ t -> Ġt, then h e, then Ġt he -> 260"
    )
    text = tok.decode(got)
    assert text == "hello the llama", (
        f"decode should give 'hello the llama' (special tokens skipped by default), got {text!r}"
    )
    text = tok.decode(got, skip_special_tokens=False)
    assert text == "hello the llama<|endoftext|>", (
        f"with skip_special_tokens=False the special token is kept, got {text!r}"
    )
    ids = tok.encode("a\n😀")
    assert ids == [97, 10, 240, 159, 152, 128], (
        f"with no merges, 'a\\n😀' is its UTF-8 bytes (ids = bytes here), got {ids}"
    )
    assert tok.decode(ids) == "a\n😀", (
        f"decode should turn the characters back into bytes and the bytes into text, got "
        f"{tok.decode(ids)!r}: map each character with the inverse of bytes_to_unicode()"
    )

    def check_tiny(text, want):
        got = tok.encode(text)
        assert got == want, (
            f"{text!r} should be {want}, got {got}: split into GPT-2 pieces, map bytes to "
            "characters, merge by lowest rank, look the tokens up"
        )
        assert tok.decode(got) == text.replace("<|endoftext|>", ""), f"decode of {want} is wrong"

    check_tiny("hello", want[:4])
    half = tok.decode(ids[:4])
    assert half == bytes([97, 10, 240, 159]).decode("utf-8", errors="replace"), (
        f"half an emoji should decode with errors='replace' to 'a\\n\\ufffd', got {half!r}"
    )
    ### BEGIN HIDDEN TESTS
    from tinytorch.core.tensor import hidden_cases

    hidden_cases(check_tiny, {
        "a word where two merges compete": ("tell", [116, 256, 108]),
        "a word with no merge after the first": ("hell", [104, 256, 108]),
        "a word repeated after spaces": (" the the", [260, 260]),
        "a word without its leading space": ("the", [116, 257]),
        "special tokens side by side": ("<|endoftext|><|endoftext|>", [261, 261]),
        "a two-byte character": ("ÿ", [195, 191]),
        "a word before a newline": ("hello\n", [104, 256, 108, 111, 10]),
    })
    ### END HIDDEN TESTS


test_unit_hf_tokenizer()


# %% [markdown]
# ## Systems analysis: sequence length, vocabulary and speed, measured on your machine
#
# **The trade-off.** One training run gives every smaller vocabulary for free: training is
# greedy, so the first `k` merges of the 512-id run above are exactly what a run asked for
# `256 + k` ids would learn, and `BPETokenizer(merges[:k])` is that tokenizer. The cell
# below measures, on Shakespeare that was **not** used for training (from the last tenth,
# the usual validation split), how many tokens each vocabulary needs per character, and
# what that means for a model of width 128: the embedding table's size (`vocab_size x 128`
# float32 numbers), how many characters fit in a context of 256 tokens, and the cost of
# attention relative to the character tokenizer, which grows with the square of the number
# of tokens.

# %% nbgrader={"grade": false, "grade_id": "analysis-tradeoff", "locked": false, "schema_version": 3, "solution": false, "task": false}
def tradeoff_report(char, trained, held_out, width=128, context=256):
    rows = [("char", char.vocab_size, len(char.encode(held_out)))]
    merges = list(trained.merges)
    for k in sorted({0, 64, 128, len(merges)}):
        if k <= len(merges):
            tok = BPETokenizer(merges[:k])
            rows.append((f"bpe, {k} merges", tok.vocab_size, len(tok.encode(held_out))))
    print(f"{'tokenizer':>16} {'vocab':>6} {'tokens/char':>12} {'chars in ' + str(context):>13}"
          f" {'embedding':>10} {'attention':>10}")
    for name, vocab, n_tokens in rows:
        per_char = n_tokens / len(held_out)
        print(f"{name:>16} {vocab:>6} {per_char:>12.3f} {context / per_char:>13.0f} "
              f"{vocab * width * 4 / 1024:>7.0f} KB {(n_tokens / rows[0][2]) ** 2:>9.2f}x")


char = CharTokenizer.train(text)
cut = len(text) * 9 // 10
held_out = text[cut:cut + 20_000]
tradeoff_report(char, bpe, held_out)

# %% [markdown]
# **Training: update, do not recount.** Without the `where` table, every merge would be a
# pass over the whole corpus: recount every pair of every word, choose the best, rewrite
# every word with it. The cell below times the counting and the rewriting of one such pass
# (your `get_pair_counts` and `merge_pair` over each distinct word of the 40,000 training
# characters as bytes, with the first merge your tokenizer learned), and counts the pairs
# the words hold before the first merge and after the last (cut by your trained tokenizer):
# words shrink as pairs merge, and a pass costs about the same per pair. So `n` passes cost
# between `n` times the second number and `n` times the first, at the measured cost per
# pair, before a single best pair is chosen; set that against the time your `train` took
# on the same text above.

# %% nbgrader={"grade": false, "grade_id": "analysis-training", "locked": false, "schema_version": 3, "solution": false, "task": false}
def recount_step(words, weights, pair, new_id):
    """The counting and rewriting of one slow merge: every pair of every word, `pair` merged
    in all of them."""
    counts = {}
    for ids, weight in zip(words, weights):
        get_pair_counts(ids, counts, weight)
    return counts, [merge_pair(ids, pair, new_id) for ids in words]


def training_report(trained, text, update_s):
    n = len(trained.merges)
    word_counts = Counter(split_words(text))
    weights = list(word_counts.values())
    as_bytes = [list(word.encode("utf-8")) for word in word_counts]
    first_merge = next(iter(trained.merges))
    step_s = float("inf")
    for _ in range(5):  # the best of five: a busy machine only ever adds time
        start = time.perf_counter()
        recount_step(as_bytes, weights, first_merge, 256)
        step_s = min(step_s, time.perf_counter() - start)
    pairs_first = sum(len(ids) - 1 for ids in as_bytes)
    pairs_last = sum(len(trained.encode(word)) - 1 for word in word_counts)
    per_pair = step_s / pairs_first
    low, high = n * pairs_last * per_pair, n * pairs_first * per_pair
    print(f"{len(text):,} characters, {len(word_counts):,} distinct words, {n} merges; "
          f"your train (updating): {update_s * 1e3:.0f} ms")
    print(f"one pass, counting and rewriting: {pairs_first:,} pairs in {step_s * 1e3:.1f} ms "
          f"({per_pair * 1e9:.0f} ns a pair); {pairs_last:,} pairs after the last merge")
    print(f"{n} passes: {low * 1e3:.0f} to {high * 1e3:.0f} ms before choosing any pair, "
          f"{low / update_s:.1f}x to {high / update_s:.1f}x the time of updating")


training_report(bpe, train_text, train_seconds)

# %% [markdown]
# **Encoding speed, and the cache.** Encoding a character is one dictionary lookup;
# encoding a word with BPE is a loop over its pairs. The cache turns the second into the
# first for words already seen. The cell measures throughput with a cold cache (a fresh
# tokenizer) and a warm one (the same text again), and what text from outside the training
# data costs: the Shakespeare tokenizer has learned no merges for Greek or Chinese, so those
# fall back to raw bytes, two or three tokens per character, where the character tokenizer
# cannot encode them at all.

# %% nbgrader={"grade": false, "grade_id": "analysis-speed", "locked": false, "schema_version": 3, "solution": false, "task": false}
def speed_report(char, trained, held_out):
    fresh = BPETokenizer(list(trained.merges))  # same merges, empty cache

    def rate(encode):
        start = time.perf_counter()
        n = len(encode(held_out))
        return len(held_out) / (time.perf_counter() - start), n

    for name, encode in (("char", char.encode), ("bpe, cold cache", fresh.encode),
                         ("bpe, warm cache", fresh.encode)):
        chars_per_s, n = rate(encode)
        print(f"{name:>16}: encode {chars_per_s / 1e6:5.2f} M characters/s, {n:,} tokens")
    ids = fresh.encode(held_out)
    start = time.perf_counter()
    assert fresh.decode(ids) == held_out
    print(f"{'bpe':>16}: decode {len(held_out) / (time.perf_counter() - start) / 1e6:5.2f} "
          "M characters/s")
    for foreign in ("Ἐν ἀρχῇ ἦν ὁ λόγος", "学而时习之，不亦说乎", "the king is dead"):
        n = len(fresh.encode(foreign))
        try:
            char.encode(foreign)
            char_note = "encodes it"
        except ValueError:
            char_note = "cannot encode it"
        print(f"{foreign!r}: BPE {n / len(foreign):.2f} tokens/char; "
              f"the char tokenizer {char_note}")


speed_report(char, bpe, held_out)

# %% [markdown]
# What to read in these numbers (on Tiny Shakespeare; yours will be close): the first
# merges pay the most (64 merges already cut a third of the tokens), and at 512 ids a token
# holds almost two characters, so the same context holds nearly twice as much text and
# attention over it costs about a third. The embedding table grows with the vocabulary,
# but at width 128 even 512 rows are a quarter of a megabyte; in GPT-2 small, 50,257 rows
# of width 768 are 38.6 million of its 124 million parameters.
#
# Updating the pair counts instead of recounting them wins on the first 40,000 characters
# already: the passes of recounting alone, before they choose a single pair, came to about
# 1.5 to 3.5 times the whole of training by updating on a busy two-core machine, and the gap
# widens with the corpus, since a pass grows with the number of distinct words while a
# merge changes only the words that hold its pair (on 100,000 characters, training to 512
# ids takes about half a second on a two-core machine). The warm cache skips the merge
# loops, so what remains of the encoding time is mostly `split_words`, a Python loop over
# characters; the character tokenizer, one lookup per character, is tens of times faster
# still. And text unlike the training data costs more tokens per character: a tokenizer
# trained on English makes every other language more expensive for the same model.
#
# ## What comes next
#
# - **Module 11 (embeddings)** turns each id into a learned vector: an embedding table with
#   `vocab_size` rows, looked up by the ids your tokenizer makes, plus the position of each
#   token in the sequence.
# - **The TinyGPT milestone** trains a GPT on Tiny Shakespeare with your `CharTokenizer`:
#   65 ids, `CharTokenizer.train(text)`, and `decode` to read what the model writes.
# - **Module 12 (attention)** is where the sequence length you measured here turns into
#   time and memory: a sequence of `T` tokens builds `T x T` attention scores.
