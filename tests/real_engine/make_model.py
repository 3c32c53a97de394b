"""Make the tiny model the real engine serves in the tests: no download, a few seconds on a CPU.

Runs with the engine's own venv (tests/real_engine/engine.py `venv`), which carries torch,
transformers and tokenizers as vLLM pins them: `python make_model.py OUT`.

A byte-level BPE tokenizer trained on the corpus below, and a Qwen2ForCausalLM (the
architecture of the fork's Qwen models) small enough to train in seconds: hidden 128, two
layers, head_dim 64 (vLLM's CPU attention refuses head_dim 16), one KV head. It is trained
until it has learnt the corpus by heart, so it answers the probe's questions
(onecat/answers/probe-prompts.txt) the way a real model does: "The capital of France is"
gives " Paris." in transformers and in vLLM. Seeds are fixed; the files come out the same
for the same torch and tokenizers, and the tests key their cache on this file's text.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# The probe's questions with their answers, the likelihood judge's reference texts
# (onecat/answers/prompts.py SCORE_TEXTS) and a few plain sentences for the benchmark's words.
CORPUS = [
    "The capital of France is Paris.",
    "Count from one to ten: one, two, three, four, five, six, seven, eight, nine, ten.",
    "Water boils at a temperature of 100 degrees Celsius.",
    "The capital of France is Paris. Water boils at 100 degrees Celsius at sea level, and "
    "the first five numbers are one, two, three, four and five.",
    "法国的首都是巴黎。在标准大气压下\uff0c水的沸点是100摄氏度。",
    "水在标准大气压下的沸点是100摄氏度。",
    "The capital of Italy is Rome.",
    "The capital of Germany is Berlin.",
    "A server in a rack answers questions about the weather and the news.",
    "The quick brown fox jumps over the lazy dog.",
]
STEPS = 300
SEED = 0


def main(out: Path) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)
    out.mkdir(parents=True, exist_ok=True)

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    bpe.train_from_iterator(CORPUS * 4, trainers.BpeTrainer(
        vocab_size=512, special_tokens=specials, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>",
                                        pad_token="<|endoftext|>")
    # A chat template like Qwen's, so /v1/chat/completions works as on the fleet.
    tokenizer.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    tokenizer.save_pretrained(out)

    eos = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=128, intermediate_size=256,
        num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=64,
        max_position_embeddings=512, bos_token_id=eos, eos_token_id=eos,
        tie_word_embeddings=True, torch_dtype="float32")
    model = Qwen2ForCausalLM(config)
    rows = [tokenizer(text)["input_ids"] + [eos] for text in CORPUS]
    width = max(len(row) for row in rows)
    ids = torch.full((len(rows), width), eos)
    labels = torch.full((len(rows), width), -100)
    for i, row in enumerate(rows):
        ids[i, :len(row)] = torch.tensor(row)
        labels[i, :len(row)] = torch.tensor(row)
    optimiser = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    loss = None
    for _ in range(STEPS):
        loss = model(input_ids=ids, labels=labels).loss
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    model.eval()
    model.save_pretrained(out, safe_serialization=True)
    prompt = tokenizer("The capital of France is", return_tensors="pt")
    answer = model.generate(**prompt, max_new_tokens=3, do_sample=False)
    said = tokenizer.decode(answer[0][prompt["input_ids"].shape[1]:])
    (out / "made.json").write_text(json.dumps(
        {"final_loss": float(loss.detach()) if loss is not None else None, "france": said}) + "\n")
    if "Paris" not in said:
        sys.exit(f"the tiny model did not learn its corpus: 'The capital of France is' -> {said!r}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
