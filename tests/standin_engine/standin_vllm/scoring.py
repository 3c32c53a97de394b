"""Logprobs on the completions API, in vLLM's response shapes.

vLLM (vllm/entrypoints/openai/serving_completion.py, request_output_to_completion_response and
_create_completion_logprobs; protocol.py's CompletionLogProbs):
- `logprobs: N` gives choices[0].logprobs = {text_offset, token_logprobs, tokens,
  top_logprobs}, one entry per generated token; top_logprobs holds the token's own entry and
  the N best (here: the token itself, the stand-in knows no alternatives);
- `echo: true` puts the prompt first: text = prompt + answer, and the logprobs lists start
  with the prompt's tokens, the first one's logprob and top_logprobs None (nothing predicts
  it); with `max_tokens: 0` only the prompt comes back;
- `prompt_logprobs: N` gives choices[0].prompt_logprobs = [None, {token_id: {logprob, rank,
  decoded_token}}, ...] (JSON keys are strings);
- logprobs are clamped at -9999.0.
"""

from __future__ import annotations

from dataclasses import dataclass

from standin_vllm import answers, tokenizer


@dataclass(frozen=True)
class Scorer:
    vocab_size: int
    batch: int
    noise: float
    bad: str  # the STANDIN_BAD_MODE in effect, "" on a healthy card


def prompt_pieces(prompt: str | list[int], special: bool, vocab_size: int
                  ) -> list[tuple[int, str]]:
    """(token id, token text) of a prompt, as the stand-in's tokenizer splits it."""
    if isinstance(prompt, list):
        return [(t, f"token_id:{t}") for t in prompt]
    pieces: list[tuple[int, str]] = [(tokenizer.BOS_ID, "<s>")] if special else []
    for part in tokenizer._SPECIAL_RE.split(prompt):
        if part in (tokenizer.IM_START, tokenizer.IM_END):
            pieces.append((2 if part == tokenizer.IM_START else 3, part))
            continue
        for match in tokenizer._TOKEN_RE.finditer(part):
            start = match.start()
            # A word's token carries the space before it, as byte-level BPE pieces do.
            text = (" " if start and part[start - 1].isspace() else "") + match.group()
            pieces.append((tokenizer._token_id(match.group(), vocab_size), text))
    return pieces


def add(choice: dict, body: dict, prompt: str | list[int], special: bool, words: list[str],
        scorer: Scorer) -> None:
    """Fill choice's logprobs (and prompt_logprobs, and the echoed text) as vLLM does."""
    want = body.get("logprobs")
    echo = bool(body.get("echo"))
    want_prompt = body.get("prompt_logprobs")
    if want is None and want_prompt is None and not echo:
        return
    pieces = prompt_pieces(prompt, special, scorer.vocab_size) \
        if echo or want_prompt is not None else []
    prompt_lps: list[float | None] = [None]
    for position in range(1, len(pieces)):
        prompt_lps.append(max(answers.token_logprob(
            pieces[position][0], pieces[position - 1][0], position, scorer.batch, scorer.noise,
            scorer.bad), -9999.0))
    if echo:
        choice["text"] = (prompt if isinstance(prompt, str) else "") + choice["text"]
    if want_prompt is not None:
        choice["prompt_logprobs"] = [
            None if lp is None else {str(tid): {"logprob": lp, "rank": 1, "decoded_token": text}}
            for (tid, text), lp in zip(pieces, prompt_lps, strict=True)]
    if want is None:
        return
    tokens: list[str] = []
    values: list[float | None] = []
    if echo:
        tokens += [text for _, text in pieces]
        values += prompt_lps
    for i, word in enumerate(words):
        tokens.append(word)
        values.append(max(answers.generated_logprob(i, scorer.batch, scorer.noise, scorer.bad),
                          -9999.0))
    offsets, at = [], 0
    for token in tokens:
        offsets.append(at)
        at += len(token)
    choice["logprobs"] = {
        "text_offset": offsets, "token_logprobs": values, "tokens": tokens,
        "top_logprobs": [None if v is None else {t: v} for t, v in zip(tokens, values,
                                                                        strict=True)]}
