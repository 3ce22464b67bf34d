"""What the course says about each module: its one-line summary, the time and difficulty,
what a student should already know, the systems question it answers and the matching chapter
of the Machine Learning Systems book. The structure (numbers, slugs, prerequisites, export
targets) is in registry.py; ``Module.summary`` and friends read this table by number.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModuleText:
    summary: str
    # Empty: not stated yet, and the site says nothing rather than guess.
    hours: str = ""  # e.g. "8-10"
    difficulty: int = 0  # 1 (easiest) to 4; 0: not rated
    needs_to_know: str = ""  # one sentence: what a student should already be able to do
    # The systems question the module answers (markdown; LaTeX math in $...$ is fine).
    question: str = ""
    # The matching chapter of the Machine Learning Systems book (mlsysbook.ai): (title, URL),
    # or (title, URL, why) when the book has no chapter of the module's own and this is the
    # closest.
    book: tuple[str, ...] = ()


MODULE_TEXT: dict[int, ModuleText] = {
    1: ModuleText(
        summary=(
            "N-dimensional arrays on NumPy: creation, arithmetic with broadcasting, matmul, "
            "reductions, reshaping, indexing, and the op records autograd will need."
        ),
        hours="4-6",
        difficulty=2,
        needs_to_know="Python classes and NumPy arrays: shapes, indexing, dtypes.",
        question=(
            "What does each operation cost in memory: when does NumPy copy and when does it "
            "share a view, and why does one stray float64 double the memory of everything "
            "built on it?"
        ),
        book=("Frameworks", "https://mlsysbook.ai/vol1/frameworks/frameworks.html"),
    ),
    2: ModuleText(
        summary="ReLU, Sigmoid, Tanh, GELU, SiLU, Softmax and LogSoftmax, numerically stable.",
        hours="3-4",
        difficulty=2,
        needs_to_know=("Module 01's Tensor, and what $e^x$ and $\\log x$ do for large and small "
                       "inputs."),
        question=(
            "Why does a formula that is one line on paper return `nan` in float32, and why is "
            "an activation limited by memory traffic rather than arithmetic?"
        ),
        book=("Neural Computation", "https://mlsysbook.ai/vol1/nn_computation/nn_computation.html"),
    ),
    3: ModuleText(
        summary="Module with a parameter registry, Linear, Dropout, Sequential, state dicts.",
        hours="4-6",
        difficulty=3,
        needs_to_know="Python classes (`__setattr__`, properties) and matrix shapes.",
        question=(
            "Where do a network's parameters live, how much memory do they take, and how does "
            "a framework find each one exactly once, even when two layers share it?"
        ),
        book=("Neural Computation", "https://mlsysbook.ai/vol1/nn_computation/nn_computation.html"),
    ),
    4: ModuleText(
        summary="Mean squared error, cross-entropy from logits, binary cross-entropy with logits.",
        hours="3-4",
        difficulty=2,
        needs_to_know="Logarithms and the softmax of module 02.",
        question=(
            "Why does a textbook cross-entropy return `inf` on confident predictions, and why "
            "is the probability matrix the largest array of a language model's training step?"
        ),
        book=("Neural Computation", "https://mlsysbook.ai/vol1/nn_computation/nn_computation.html"),
    ),
    5: ModuleText(
        summary="Dataset, TensorDataset and a batching, shuffling DataLoader.",
        hours="2-3",
        difficulty=2,
        needs_to_know="Python iterators and generators, and seeded random number generators.",
        question=(
            "Which examples go into which batch, in what order, and how does a run stopped at "
            "epoch 5 see exactly the batches it would have seen?"
        ),
        book=("Training", "https://mlsysbook.ai/vol1/training/training.html"),
    ),
    6: ModuleText(
        summary=(
            "Reverse-mode differentiation: derivative rules, an iterative topological "
            "backward, no_grad, detach and gradcheck."
        ),
        hours="8-10",
        difficulty=4,
        needs_to_know="The chain rule, and graphs (a topological order) from a first course.",
        question=(
            "How does one backward pass give every gradient for about the cost of two forward "
            "passes, and what memory does the graph hold until it runs?"
        ),
        book=("Frameworks", "https://mlsysbook.ai/vol1/frameworks/frameworks.html"),
    ),
    7: ModuleText(
        summary="SGD with momentum, Adam, AdamW, gradient clipping.",
        hours="3-4",
        difficulty=2,
        needs_to_know="Gradients as module 06 leaves them in `.grad`; running averages.",
        question=(
            "What does an optimizer remember between steps, and why does Adam's state cost "
            "twice the memory of the model it trains?"
        ),
        book=("Training", "https://mlsysbook.ai/vol1/training/training.html"),
    ),
    8: ModuleText(
        summary="Training loops, learning-rate schedules, safe checkpoints, resumable runs.",
        hours="5-6",
        difficulty=3,
        needs_to_know="Modules 03-07 end to end, and files: writing, renaming, reading back.",
        question=(
            "What is a training run made of, so that a stopped run resumes bit for bit and a "
            "crash in the middle of saving loses nothing?"
        ),
        book=("Training", "https://mlsysbook.ai/vol1/training/training.html"),
    ),
    9: ModuleText(
        summary="Conv2d with im2col, pooling, a CNN on digits.",
        hours="5-6",
        difficulty=3,
        needs_to_know="Module 06's derivative rules and module 03's Linear; array strides help.",
        question=(
            "Why is a convolution written as one big matrix product, and what does copying "
            "every $k \\times k$ window into a column cost in memory?"
        ),
        book=("Architectures", "https://mlsysbook.ai/vol1/nn_architectures/nn_architectures.html"),
    ),
    10: ModuleText(
        summary="Character and byte-level BPE tokenizers.",
        hours="5-6",
        difficulty=3,
        needs_to_know="Python strings, bytes and UTF-8, and dictionaries.",
        question=(
            "How does the vocabulary size trade the size of the embedding and output layers "
            "against the length of every sequence, which attention pays for quadratically?"
        ),
        book=(
            "Architectures",
            "https://mlsysbook.ai/vol1/nn_architectures/nn_architectures.html",
            "tokens are the input of the transformer models it describes.",
        ),
    ),
    11: ModuleText(
        summary=(
            "Token embeddings (and the tied output layer), learned and sinusoidal positions, "
            "rotary embeddings with Llama 3's scaling."
        ),
        hours="4-5",
        difficulty=3,
        needs_to_know="Indexing and gradients (modules 01, 06); sines, cosines and rotations.",
        question=(
            "How does a model learn what a token id means and where it stands, and what does "
            "each way of encoding positions cost in parameters and in length it can handle?"
        ),
        book=("Architectures", "https://mlsysbook.ai/vol1/nn_architectures/nn_architectures.html"),
    ),
    12: ModuleText(
        summary=(
            "Scaled dot-product, causal and padding masks, multi-head and grouped-query "
            "attention, with a KV cache."
        ),
        hours="6-8",
        difficulty=4,
        needs_to_know="Matrix products with batch axes, softmax (02) and autograd (06).",
        question=(
            "Attention's $(T, T)$ table of scores grows with the square of the sequence "
            "length: at what length does it, and not the weights, fill the memory?"
        ),
        book=("Architectures", "https://mlsysbook.ai/vol1/nn_architectures/nn_architectures.html"),
    ),
    13: ModuleText(
        summary="LayerNorm, RMSNorm, MLPs, the pre-norm block, and GPT with generation.",
        hours="8-10",
        difficulty=4,
        needs_to_know=(
            "Everything from modules 01-12: you assemble them, so their shapes and "
            "gradients must be second nature."
        ),
        question=(
            "Attention's memory grows as $O(N^2)$ in the sequence length $N$, the MLP's "
            "compute as $O(N \\cdot d^2)$ in the width $d$: which one hits a wall first as a "
            "GPT grows?"
        ),
        book=("Architectures", "https://mlsysbook.ai/vol1/nn_architectures/nn_architectures.html"),
    ),
    14: ModuleText(
        summary="Measure time, memory and FLOPs of your own models.",
        hours="4-5",
        difficulty=3,
        needs_to_know="Your GPT from module 13, and what a FLOP and a byte of memory are.",
        question=(
            "Where does the time of a training step go, how many FLOPs did the ops that ran "
            "really cost, and what memory does backward keep alive?"
        ),
        book=(
            "Benchmarking",
            "https://mlsysbook.ai/vol1/benchmarking/benchmarking.html",
            "profiling is the measuring that benchmarking is built on.",
        ),
    ),
    15: ModuleText(
        summary="Real int8 weights and activations, calibration, accuracy against size.",
        hours="4-6",
        difficulty=3,
        needs_to_know="Your GPT from module 13; integers, rounding and NumPy dtypes.",
        question=(
            "How few bits can a weight keep before the model notices, and how many bytes "
            "does that really save once the scales are counted?"
        ),
        book=("Model Compression", "https://mlsysbook.ai/vol1/optimizations/optimizations.html"),
    ),
    16: ModuleText(
        summary="Pruning and distillation.",
        hours="5-6",
        difficulty=3,
        needs_to_know="Your GPT from module 13 and an optimizer step from module 07.",
        question=(
            "Which weights can a model lose, when does removing them make it faster rather "
            "than only sparser, and what can a small model learn from a big one?"
        ),
        book=("Model Compression", "https://mlsysbook.ai/vol1/optimizations/optimizations.html"),
    ),
    17: ModuleText(
        summary=(
            "Vectorization, memory layout, BLAS threads, allocation reuse and fused kernels, "
            "plugged into your framework through its kernel table and measured."
        ),
        hours="6-8",
        difficulty=4,
        needs_to_know=(
            "Your autograd's derivative table (06), attention (12), the GPT (13) and "
            "the profiler (14) that tells you where the time goes."
        ),
        question=(
            "A training step does about 4 GFLOP that BLAS can run in about 21 ms: where do "
            "the other milliseconds go, and which of them can a fused kernel win back?"
        ),
        book=(
            "HW Acceleration",
            "https://mlsysbook.ai/vol1/hw_acceleration/hw_acceleration.html",
            "it shows how accelerators run networks; this module does it on a CPU.",
        ),
    ),
    18: ModuleText(
        summary=(
            "Llama, Qwen and MoE checkpoints on an engine built from your own layers: the "
            "decoder block, model assembly, dense and paged KV caches, generation, continuous "
            "batching, measured."
        ),
        hours="8-10",
        difficulty=4,
        needs_to_know=(
            "Modules 11-13 (RoPE, grouped-query attention, RMSNorm and SwiGLU) and module "
            "08's safetensors reader."
        ),
        question=(
            "Why does generating token $N$ without a cache cost $O(N^2)$, and how much memory "
            "does the cache take per token when a server holds many sequences at once?"
        ),
        book=("Model Serving", "https://mlsysbook.ai/vol1/model_serving/model_serving.html"),
    ),
    19: ModuleText(
        summary=(
            "Fair, repeatable measurements against a reference framework: warm-up, repeats, "
            "medians, paired runs, confidence intervals and a verdict that respects the noise."
        ),
        hours="4-6",
        difficulty=3,
        needs_to_know="The profiler from module 14, and medians, quartiles and resampling.",
        question=(
            "Two timings differ by 4%: is one framework faster, or did the machine "
            "breathe? How many repeats, in what order, tell the two apart?"
        ),
        book=("Benchmarking", "https://mlsysbook.ai/vol1/benchmarking/benchmarking.html"),
    ),
    20: ModuleText(
        summary="Make your TinyGPT fast and small, and prove it with measurements.",
        hours="8-12",
        difficulty=4,
        needs_to_know=(
            "Modules 14-19: you combine quantization, pruning, fused kernels and the KV "
            "cache, and prove each gain with the benchmark harness."
        ),
        question=(
            "How much faster and smaller can your TinyGPT get while its validation loss "
            "stays within 0.05 of where it started, and can you prove every figure?"
        ),
        book=(
            "Benchmarking",
            "https://mlsysbook.ai/vol1/benchmarking/benchmarking.html",
            "the capstone proves each gain of modules 14-19 by measurement.",
        ),
    ),
}
