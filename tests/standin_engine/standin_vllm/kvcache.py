"""The stand-in's prefix cache: an LRU of full KV blocks keyed by chained block hashes.

What vLLM's V1 engine does, and what this keeps of it:

- A prompt's token ids are cut into blocks of `block_size` tokens; only full blocks are hashed,
  each hash chained over its parent's (`hash_block_tokens`: hash of (parent hash, the block's
  token ids), the first block's parent a fixed NONE_HASH; 1Cat-vLLM
  vllm/v1/core/kv_cache_utils.py:541-568). Equal hashes mean equal prefixes.
- A new request's longest run of cached leading blocks is its hit, capped at
  `num_tokens - 1` so that the last prompt token is always computed for the logits
  (`KVCacheManager.get_computed_blocks`, vllm/v1/core/kv_cache_manager.py:198-235).
- Blocks are cached when they are allocated for a scheduled request, before the forward pass
  (`allocate_slots` -> `cache_blocks`), so a request scheduled right after a first one with the
  same system prompt already hits it.
- Freed blocks stay cached and are evicted least recently used first when the pool
  (`num_gpu_blocks` = KV cache tokens // block size) needs room.
- The counters are in tokens, not blocks: queries += the prompt's tokens, hits += the cached
  tokens (`PrefixCacheStats.record`, vllm/v1/metrics/stats.py:131-142), exported as the
  Prometheus counters `vllm:prefix_cache_queries` and `vllm:prefix_cache_hits`
  (vllm/v1/metrics/loggers.py:543 and 554; prometheus_client exposes counters with `_total`).

- A request's `cache_salt` is one of the first block's extra keys (1Cat-vLLM
  vllm/v1/core/kv_cache_utils.py `generate_block_hash_extra_keys`: `[request.cache_salt] if
  start_token_idx == 0 and request.cache_salt`), and every later hash chains over it: two
  salts share no block, the same salt shares as before.

- Generated tokens fill blocks too, which are cached as they fill: the next turn of a
  conversation (its previous prompt, the answer, the new user message) hits up to the end of
  the previous answer (PrefixRequest.finished caches prompt + answer when the request ends).

Kept simpler: blocks of requests still running are not pinned (the LRU touches them on every
lookup and insert, so they are the last to go).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

NONE_HASH = hash(("onecat-standin", "none-hash"))


def block_hashes(token_ids: Sequence[int], block_size: int, salt: str | None = None) -> list[int]:
    """The chained hashes of the full blocks of `token_ids` (a trailing partial block has none);
    a salt is the first block's extra key."""
    hashes: list[int] = []
    parent = NONE_HASH
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        extra = (salt,) if start == 0 and salt else None
        parent = hash((parent, tuple(token_ids[start:start + block_size]), extra))
        hashes.append(parent)
    return hashes


class PrefixCache:
    """An LRU of `num_blocks` blocks of `block_size` tokens; `enabled=False` caches nothing."""

    def __init__(self, num_blocks: int, block_size: int = 16, enabled: bool = True) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be at least 1, not {block_size}")
        self.num_blocks = max(0, num_blocks)
        self.block_size = block_size
        self.enabled = enabled
        self.queries = 0  # prompt tokens looked up (vllm:prefix_cache_queries)
        self.hits = 0  # of which cached (vllm:prefix_cache_hits)
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def lookup(self, token_ids: Sequence[int], salt: str | None = None) -> int:
        """Tokens of this prompt already cached (whole blocks, at most len - 1); counted.

        Without prefix caching nothing is looked up and nothing counted, as in vLLM."""
        if not self.enabled:
            return 0
        hit = 0
        limit = (len(token_ids) - 1) // self.block_size
        for block in block_hashes(token_ids, self.block_size, salt)[:limit]:
            if block not in self._blocks:
                break
            self._blocks.move_to_end(block)
            hit += self.block_size
        self.queries += len(token_ids)
        self.hits += hit
        return hit

    def insert(self, token_ids: Sequence[int], salt: str | None = None) -> None:
        """Cache the prompt's full blocks as most recent; evict the least recent beyond capacity."""
        if not self.enabled or not self.num_blocks:
            return
        for block in block_hashes(token_ids, self.block_size, salt):
            self._blocks[block] = None
            self._blocks.move_to_end(block)
        while len(self._blocks) > self.num_blocks:
            self._blocks.popitem(last=False)

    def admit(self, token_ids: Sequence[int], salt: str | None = None) -> int:
        """What the scheduler does when it admits a request: look up, then cache its blocks."""
        hit = self.lookup(token_ids, salt)
        self.insert(token_ids, salt)
        return hit

    def hit_rate(self) -> float:
        return self.hits / self.queries if self.queries else 0.0


class PrefixRequest:
    """One request's use of the cache: `request()` when the engine admits it (look up, cache
    the prompt's blocks), `finished(ids)` when its last token is out (cache the blocks of
    prompt + generated tokens)."""

    def __init__(self, cache: PrefixCache, prompt_ids: Sequence[int],
                 salt: str | None = None) -> None:
        self.cache = cache
        self.prompt_ids = list(prompt_ids)
        self.salt = salt

    def __call__(self) -> int:
        return self.cache.admit(self.prompt_ids, self.salt)

    def finished(self, generated_ids: Sequence[int]) -> None:
        self.cache.insert([*self.prompt_ids, *generated_ids], self.salt)
