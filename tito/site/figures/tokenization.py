"""Module 10 (Tokenization): its figures, each with its caption and alt text."""

from __future__ import annotations

from ...course.registry import COURSE_ROOT
from .drawing import ACCENT, BLUE, Figure, panels


def draw_bpe_compression(fig):
    from tinytorch.text import BPETokenizer, CharTokenizer

    text = (COURSE_ROOT / "milestones" / "data" / "tinyshakespeare.txt").read_text("utf-8")
    train, held = text[:40_000], text[200_000:210_000]
    sizes = [256, 300, 400, 600, 800, 1000]
    ratios = []
    for size in sizes:
        tok = BPETokenizer.train(train, size)
        ratios.append(len(tok.encode(held)) / len(held))
    char = CharTokenizer.train(text)
    (ax,) = panels(fig, [[0.11, 0.16, 0.85, 0.74]])
    ax.plot(sizes, ratios, marker="o", color=BLUE, linewidth=1.8, label="byte-level BPE")
    ax.scatter(
        [char.vocab_size],
        [1.0],
        color=ACCENT,
        zorder=3,
        label=f"characters ({char.vocab_size} ids)",
    )
    for s, r in zip(sizes, ratios):
        ax.annotate(
            f"{r:.2f}", (s, r), textcoords="offset points", xytext=(0, 7), ha="center", fontsize=8
        )
    ax.set_xlabel("vocabulary size (ids)")
    ax.set_ylabel("tokens per character")
    ax.set_ylim(0, 1.15)
    ax.legend(frameon=False, loc="lower left")
    ax.set_title("Measured on Tiny Shakespeare (trained on 40k characters, tested on 10k others)")


FIGURES = [
    Figure(
        "tokenization",
        "compression",
        "Measured: how many tokens a character costs as the BPE "
        "vocabulary grows (drawn by `tito site figures`).",
        "Tokens per character fall from 1.0 at 256 byte ids as merges "
        "are added; the character tokenizer sits at 1.0 with 65 ids.",
        draw_bpe_compression,
        size=(8.0, 3.4),
        narrow=(4.2, 3.8),
    ),
]
