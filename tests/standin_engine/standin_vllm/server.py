"""The OpenAI-compatible HTTP API of the stand-in, on one asyncio loop (like uvicorn).

Routes and shapes follow vLLM's api_server: /health, /v1/models, /v1/completions,
/v1/chat/completions (SSE streaming with `data: [DONE]`, include_usage),
POST /tokenize, GET /metrics. Only /v1/* routes need the API key (any one of
--api-key's values), as in vLLM.
`--middleware` classes run as ASGI middleware in front of the routes (as vLLM adds them
with Starlette's add_middleware): one that answers itself short-circuits the request,
one that calls the app lets it through to the routes.
A request's arrival is stamped when its first bytes come off the socket, so
the simulated prefill starts then, however busy the loop is afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import os
import sys
import time
import uuid
from dataclasses import dataclass, field
from http import HTTPStatus
from itertools import islice

from standin_vllm import answers, scoring, tokenizer
from standin_vllm.engine import Engine
from standin_vllm.kvcache import PrefixCache, PrefixRequest
from standin_vllm.settings import hits

# vLLM's guarded prefixes (1Cat-vLLM vllm/entrypoints/openai/server_utils.py:38).
GUARDED_PREFIX = ("/v1", "/v2", "/inference")


@dataclass
class ServeConfig:
    served_names: list[str]
    model_path: str
    max_model_len: int
    vocab_size: int
    api_keys: list[str]  # --api-key's values, else VLLM_API_KEY; empty: no key
    access_log: bool
    middleware: list = field(default_factory=list)
    prefix_cache: PrefixCache | None = None  # --enable-prefix-caching (kvcache.py)


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    arrived: float
    line: str


class ApiError(Exception):
    def __init__(self, status: int, message: str, kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind


def _dumps(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


class Connection(asyncio.Protocol):
    """One client connection: parses requests, runs them one at a time (keep-alive)."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.arrived = 0.0
        self.busy = False
        self.keep_alive = True
        self.lost = asyncio.get_running_loop().create_future()
        self.peer = ("-", 0)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.peer = transport.get_extra_info("peername") or ("-", 0)
        self.app.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.app.connections.discard(self)
        if not self.lost.done():
            self.lost.set_result(None)

    def data_received(self, data: bytes) -> None:
        if not self.buf:
            self.arrived = time.monotonic()
        self.buf += data
        if not self.busy:
            self._next()

    def _next(self) -> None:
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        lines = bytes(self.buf[:end]).decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            key, _, value = line.partition(":")
            headers[key.strip().lower()] = value.strip()
        length = int(headers.get("content-length") or 0)
        if len(self.buf) < end + 4 + length:
            return
        body = bytes(self.buf[end + 4:end + 4 + length])
        del self.buf[:end + 4 + length]
        parts = lines[0].split(" ")
        if len(parts) != 3:
            self.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n"
                       b"connection: close\r\n\r\n")
            self.close()
            return
        self.keep_alive = headers.get("connection", "").lower() != "close"
        request = Request(parts[0], parts[1], headers, body, self.arrived, lines[0])
        self.arrived = time.monotonic()  # a pipelined request arrived no later than now
        self.busy = True
        task = asyncio.ensure_future(self.app.handle(self, request))
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task) -> None:
        self.busy = False
        if not task.cancelled() and task.exception() is not None:
            sys.stderr.write(f"ERROR: request failed: {task.exception()!r}\n")
            self.keep_alive = False
        if not self.keep_alive:
            self.close()
        elif self.buf:
            self._next()

    def write(self, data: bytes) -> None:
        if self.transport is None or self.transport.is_closing():
            raise ConnectionResetError("the client went away")
        self.transport.write(data)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class App:
    def __init__(self, config: ServeConfig, engine: Engine) -> None:
        self.config = config
        self.engine = engine
        self.connections: set[Connection] = set()

    # --- plumbing ----------------------------------------------------------
    def _log(self, conn: Connection, request: Request, status: int) -> None:
        if self.config.access_log:
            phrase = HTTPStatus(status).phrase
            sys.stdout.write(f'INFO:     {conn.peer[0]}:{conn.peer[1]} - "{request.line}" '
                             f"{status} {phrase}\n")
            sys.stdout.flush()

    def _head(self, status: int, headers: dict[str, str]) -> bytes:
        lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}", "server: uvicorn",
                 f"date: {time.strftime('%a, %d %b %Y %H:%M:%S GMT', time.gmtime())}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _send(self, conn: Connection, request: Request, status: int, body: bytes,
              content_type: str = "application/json") -> None:
        headers = {"content-type": content_type, "content-length": str(len(body))}
        if not conn.keep_alive:
            headers["connection"] = "close"
        conn.write(self._head(status, headers) + body)
        self._log(conn, request, status)

    def _send_json(self, conn: Connection, request: Request, status: int, obj: object) -> None:
        self._send(conn, request, status, _dumps(obj))

    # --- routing -----------------------------------------------------------
    async def _middleware_passes(self, conn: Connection, request: Request) -> dict | None:
        """Run the --middleware chain: the headers that reach the app (a middleware may change
        them, as Starlette passes each one's scope inward), or None when a middleware answered
        the request itself. The body the app reads is the one the chain's `receive` gives, as
        Starlette's Request reads it (a middleware may hand a new one inward); it replaces the
        request's."""
        if not self.config.middleware:
            return request.headers
        passed: dict | None = None

        async def routes(scope, receive, send) -> None:
            nonlocal passed
            passed = {}
            for name, value in scope.get("headers") or []:
                passed[name.decode("latin-1").lower()] = value.decode("latin-1")
            body = b""
            while True:
                message = await receive()
                if message.get("type") != "http.request":
                    break
                body += message.get("body", b"")
                if not message.get("more_body", False):
                    break
            request.body = body

        chain = routes
        for middleware in self.config.middleware:  # the last added is the outermost
            chain = middleware(chain)
        answer: dict = {"status": 500, "headers": [], "body": b""}

        async def receive() -> dict:
            return {"type": "http.request", "body": request.body, "more_body": False}

        async def send(message: dict) -> None:
            if message["type"] == "http.response.start":
                answer["status"], answer["headers"] = message["status"], message.get("headers", [])
            elif message["type"] == "http.response.body":
                answer["body"] += message.get("body", b"")

        path, _, query = request.path.partition("?")
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                 "method": request.method, "scheme": "http", "path": path,
                 "raw_path": path.encode(), "query_string": query.encode(), "root_path": "",
                 "headers": [(k.encode("latin-1"), v.encode("latin-1"))
                             for k, v in request.headers.items()],
                 "client": conn.peer, "server": None}
        await chain(scope, receive, send)
        if passed is not None:
            return passed
        types = [v for k, v in answer["headers"] if k.lower() == b"content-type"]
        self._send(conn, request, answer["status"], answer["body"],
                   types[0].decode("latin-1") if types else "text/plain")
        return None

    def _authorized(self, method: str, path: str, headers: dict) -> bool:
        """vLLM's AuthenticationMiddleware (1Cat-vLLM vllm/entrypoints/openai/server_utils.py
        :38-89), inside every --middleware: OPTIONS and paths outside /v1, /v2 and /inference
        pass; else `Authorization: <scheme> <token>` with the scheme "bearer" in any case and
        the token equal to any one of the keys."""
        if not self.config.api_keys or method == "OPTIONS" or not path.startswith(GUARDED_PREFIX):
            return True
        scheme, _, token = (headers.get("authorization") or "").partition(" ")
        if not scheme or scheme.lower() != "bearer":
            return False
        digest = hashlib.sha256(token.encode("utf-8")).digest()
        match = False
        for key in self.config.api_keys:
            match |= hmac.compare_digest(digest, hashlib.sha256(key.encode("utf-8")).digest())
        return match

    async def handle(self, conn: Connection, request: Request) -> None:
        path = request.path.split("?", 1)[0]
        headers = await self._middleware_passes(conn, request)
        if headers is None:
            return
        if not self._authorized(request.method, path, headers):
            self._send_json(conn, request, 401, {"error": "Unauthorized"})
            return
        try:
            if request.method == "GET":
                self._get(conn, request, path)
            elif request.method == "POST":
                await self._post(conn, request, path)
            else:
                self._send_json(conn, request, 405, {"detail": "Method Not Allowed"})
        except ApiError as err:
            self._send_json(conn, request, err.status, {"error": {
                "message": str(err), "type": err.kind, "param": None, "code": err.status}})
        except ConnectionError:
            conn.keep_alive = False

    def _get(self, conn: Connection, request: Request, path: str) -> None:
        if path == "/health":
            self._send(conn, request, 200, b"")
        elif path == "/v1/models":
            self._send_json(conn, request, 200, self._models())
        elif path == "/metrics":
            self._send(conn, request, 200, self._metrics().encode(),
                       "text/plain; version=0.0.4; charset=utf-8")
        elif path == "/version":
            self._send_json(conn, request, 200, {"version": self.engine.settings.version})
        else:
            self._send_json(conn, request, 404, {"detail": "Not Found"})

    async def _post(self, conn: Connection, request: Request, path: str) -> None:
        try:
            body = json.loads(request.body or b"{}")
        except ValueError as exc:
            raise ApiError(400, f"Invalid JSON body: {exc}") from None
        if not isinstance(body, dict):
            raise ApiError(400, "The request body must be a JSON object.")
        if path == "/tokenize" and not self.engine.settings.no_tokenize:
            self._send_json(conn, request, 200, self._tokenize(body))
        elif path == "/v1/completions":
            await self._generate(conn, request, body, chat=False)
        elif path == "/v1/chat/completions":
            await self._generate(conn, request, body, chat=True)
        else:
            self._send_json(conn, request, 404, {"detail": "Not Found"})

    # --- endpoints ---------------------------------------------------------
    def _models(self) -> dict:
        cfg = self.config
        now = int(time.time())
        return {"object": "list", "data": [
            {"id": name, "object": "model", "created": now, "owned_by": "vllm",
             "root": cfg.model_path, "parent": None, "max_model_len": cfg.max_model_len,
             "permission": []}
            for name in cfg.served_names]}

    def _check_model(self, body: dict) -> str:
        names = self.config.served_names
        model = body.get("model") or names[0]
        if model not in names:
            raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError")
        return model

    @staticmethod
    def _prompt(body: dict, chat: bool) -> tuple[str | list[int], bool]:
        """The prompt text (or token ids) and whether special tokens are added."""
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise ApiError(400, "messages must be a non-empty list")
            add_gen = body.get("add_generation_prompt", True)
            text = tokenizer.render_chat(messages, add_generation_prompt=bool(add_gen))
            return text, bool(body.get("add_special_tokens", False))
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1:
            prompt = prompt[0]
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            return list(prompt), False
        if not isinstance(prompt, str):
            raise ApiError(400, "prompt must be a string or a list of token ids "
                                "(the stand-in serves one prompt per request)")
        return prompt, bool(body.get("add_special_tokens", True))

    def _tokenize(self, body: dict) -> dict:
        self._check_model(body)
        prompt, special = self._prompt(body, chat="messages" in body)
        ids = (prompt if isinstance(prompt, list)
               else tokenizer.tokenize_text(prompt, self.config.vocab_size, special))
        return {"count": len(ids), "max_model_len": self.config.max_model_len,
                "tokens": ids, "token_strs": None}

    async def _generate(self, conn: Connection, request: Request, body: dict,
                        chat: bool) -> None:
        cfg = self.config
        engine = self.engine
        settings = engine.settings
        model = self._check_model(body)
        if int(body.get("n", 1) or 1) != 1:
            raise ApiError(400, "the stand-in serves n=1 only")
        prompt, special = self._prompt(body, chat)
        if isinstance(prompt, list):
            n_prompt, seed_text = len(prompt), " ".join(map(str, prompt))
        else:
            n_prompt, seed_text = tokenizer.count_tokens(prompt, special), prompt
        key = "max_completion_tokens" if chat and "max_completion_tokens" in body else "max_tokens"
        max_tokens = body.get(key)
        if max_tokens is None:
            max_tokens = cfg.max_model_len - n_prompt if chat else 16
        echo = not chat and bool(body.get("echo"))
        if not isinstance(max_tokens, int) or max_tokens < (0 if echo else 1):
            raise ApiError(400, f"{key} must be at least 1, got {max_tokens}.")
        if n_prompt + max_tokens > cfg.max_model_len:
            raise ApiError(400, (
                f"This model's maximum context length is {cfg.max_model_len} tokens. However, "
                f"you requested {n_prompt + max_tokens} tokens ({n_prompt} in the messages, "
                f"{max_tokens} in the completion). Please reduce the length of the messages "
                "or completion."))
        if hits(engine.next_ordinal("fail"), settings.fail_percent):
            raise ApiError(500, "Injected failure (STANDIN_FAIL_PERCENT).", "InternalServerError")
        temperature = body.get("temperature", 1.0)
        seed = body.get("seed")
        if temperature not in (0, 0.0) and seed is None:
            seed = engine.next_ordinal("sample") * 7919  # sampling: vary between requests
        count, finish = max_tokens, "length"
        if not body.get("ignore_eos", False):
            natural = tokenizer.natural_length(seed_text)
            if natural < max_tokens:
                count, finish = natural, "stop"
        bad = settings.bad_mode if self._gone_bad(settings) else ""
        # Not batch-invariant (answers.py): what is in flight steers the tokens after the first few.
        batch = 0 if settings.batch_invariant else engine.running + engine.waiting
        words = list(islice(answers.generate(seed_text, seed, settings.broken, bad, batch, count),
                            count))
        cached = self._prefix_lookup(prompt, special, self._cache_salt(body))
        stream = bool(body.get("stream", False))
        include_usage = stream and bool((body.get("stream_options") or {}).get("include_usage"))
        stall_after = None
        if stream and hits(engine.next_ordinal("stall"), settings.stall_percent):
            stall_after = min(settings.stall_after_tokens, count - 1)
        if stream:
            await self._stream(conn, request, model, chat, n_prompt, words, finish,
                               include_usage, stall_after, cached)
            return
        trace: dict = {}
        await engine.run(n_prompt, count, lambda i: None, request.arrived, trace=trace,
                         cached=cached)
        self._prefix_store(cached, words)
        self._trace(request, trace, count)
        engine.finished(finish)
        response = self._full_response(model, chat, n_prompt, words, finish)
        if not chat:  # echo, logprobs, prompt_logprobs (scoring.py), in vLLM's shapes
            scoring.add(response["choices"][0], body, prompt, special, words,
                        scoring.Scorer(cfg.vocab_size, batch, settings.logprob_noise, bad))
        self._send_json(conn, request, 200, response)

    @staticmethod
    def _cache_salt(body: dict) -> str | None:
        """The request's cache_salt; 400 for one that is not a non-empty string, as the fork's
        `check_cache_salt_support` validator (1Cat-vLLM vllm/entrypoints/openai/completion/
        protocol.py: "Parameter 'cache_salt' must be a non-empty string if provided.")."""
        salt = body.get("cache_salt")
        if salt is not None and (not isinstance(salt, str) or not salt):
            raise ApiError(400, "Parameter 'cache_salt' must be a non-empty string if provided.")
        return salt

    def _prefix_lookup(self, prompt: str | list[int], special: bool,
                       salt: str | None = None) -> PrefixRequest | None:
        """What the engine asks once it admits the request: the prompt tokens already cached."""
        cache = self.config.prefix_cache
        if cache is None:
            return None
        ids = (prompt if isinstance(prompt, list)
               else tokenizer.tokenize_text(prompt, self.config.vocab_size, special))
        return PrefixRequest(cache, ids, salt)

    def _prefix_store(self, cached: PrefixRequest | None, words: list[str]) -> None:
        """The answer's blocks join the prefix cache (the next turn resends the answer)."""
        if cached is not None:
            cached.finished(tokenizer.tokenize_text("".join(words), self.config.vocab_size,
                                                    False))

    def _gone_bad(self, settings) -> bool:
        """STANDIN_BAD_AFTER / STANDIN_BAD_FILE: whether this answer comes from a failing card."""
        served = self.engine.next_ordinal("generate")
        if settings.bad_file and os.path.exists(settings.bad_file):
            return True
        return settings.bad_after > 0 and served > settings.bad_after

    def _trace(self, request: Request, trace: dict, tokens: int | None) -> None:
        """STANDIN_TRACE_FILE: what the server really did, for checking a client's numbers."""
        path = self.engine.settings.trace_file
        if path:
            line = {"request_id": request.headers.get("x-request-id"), "tokens": tokens, **trace}
            with open(path, "a") as sink:
                sink.write(json.dumps(line) + "\n")

    @staticmethod
    def _usage(prompt: int, completion: int) -> dict:
        return {"prompt_tokens": prompt, "total_tokens": prompt + completion,
                "completion_tokens": completion, "prompt_tokens_details": None}

    def _full_response(self, model: str, chat: bool, prompt: int, words: list[str],
                       finish: str) -> dict:
        text = "".join(words)
        base = {"id": ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex,
                "created": int(time.time()), "model": model,
                "usage": self._usage(prompt, len(words))}
        if chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text,
                                              "tool_calls": []},
                      "logprobs": None, "finish_reason": finish, "stop_reason": None}
            return {**base, "object": "chat.completion", "choices": [choice]}
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish,
                  "stop_reason": None}
        return {**base, "object": "text_completion", "choices": [choice]}

    @staticmethod
    def _event(payload: bytes) -> bytes:
        """One SSE event framed as one HTTP chunk."""
        event = b"data: " + payload + b"\n\n"
        return b"%x\r\n%s\r\n" % (len(event), event)

    async def _stream(self, conn: Connection, request: Request, model: str, chat: bool,
                      prompt: int, words: list[str], finish: str, include_usage: bool,
                      stall_after: int | None, cached: PrefixRequest | None = None) -> None:
        conn.write(self._head(200, {"content-type": "text/event-stream; charset=utf-8",
                                    "transfer-encoding": "chunked"}))
        self._log(conn, request, 200)
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        obj = "chat.completion.chunk" if chat else "text_completion"
        # Chunks are a fixed prefix + the token + a fixed suffix: cheap at 6,000 tokens/s.
        prefix = (f'{{"id":"{rid}","object":"{obj}","created":{int(time.time())},'
                  f'"model":{json.dumps(model)},"choices":[{{"index":0,').encode()
        usage_null = b',"usage":null' if include_usage else b""
        last = len(words) - 1

        empty_every = self.engine.settings.empty_text_every

        def emit(i: int) -> None:
            reason = b'"' + finish.encode() + b'"' if i == last else b"null"
            empty = empty_every > 0 and (i + 1) % empty_every == 0
            text = b'""' if empty else json.dumps(words[i]).encode()
            out = b""
            if chat:
                if i == 0:
                    out = self._event(prefix + b'"delta":{"role":"assistant","content":""},'
                                      b'"logprobs":null,"finish_reason":null}]' + usage_null + b"}")
                out += self._event(prefix + b'"delta":{"content":' + text +
                                   b'},"logprobs":null,"finish_reason":' + reason + b"}]" +
                                   usage_null + b"}")
            else:
                out = self._event(prefix + b'"text":' + text + b',"logprobs":null,'
                                  b'"finish_reason":' + reason + b',"stop_reason":null}]' +
                                  usage_null + b"}")
            conn.write(out)

        async def stall() -> None:
            """Send nothing until the client hangs up or STANDIN_STALL_S passes."""
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(conn.lost),
                                       self.engine.settings.stall_s)

        trace: dict = {}
        done = await self.engine.run(prompt, len(words), emit, request.arrived, stall_after,
                                     stall, trace, cached)
        self._trace(request, trace, len(words) if done else None)
        if not done:
            conn.keep_alive = False  # dropped mid-stream: no last chunk, no [DONE]
            return
        self._prefix_store(cached, words)
        self.engine.finished(finish)
        tail = b""
        if include_usage:
            usage = _dumps(self._usage(prompt, len(words)))
            tail += self._event(prefix[:prefix.index(b',"choices"')] +
                                b',"choices":[],"usage":' + usage + b"}")
        conn.write(tail + self._event(b"[DONE]") + b"0\r\n\r\n")

    # --- metrics -----------------------------------------------------------
    def _metrics(self) -> str:
        engine = self.engine
        labels = f'engine="0",model_name="{self.config.served_names[0]}"'
        plain = f"{{{labels}}}"
        lines: list[str] = []

        def metric(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")
            for suffix, value in samples:
                lines.append(f"{name}{suffix} {float(value)}")

        metric("vllm:num_requests_running", "gauge",
               "Number of requests in model execution batches.", [(plain, engine.running)])
        metric("vllm:num_requests_waiting", "gauge",
               "Number of requests waiting to be processed.", [(plain, engine.waiting)])
        metric("vllm:kv_cache_usage_perc", "gauge",
               "KV-cache usage. 1 means 100 percent usage.", [(plain, engine.kv_usage())])
        metric("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
               [(plain, engine.prompt_tokens_total)])
        metric("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
               [(plain, engine.generation_tokens_total)])
        cache = self.config.prefix_cache
        if cache is not None:
            # vLLM's V1 counters, in tokens (vllm/v1/metrics/loggers.py:543, 554), with the
            # `_total` that prometheus_client adds to a Counter's name.
            metric("vllm:prefix_cache_queries_total", "counter",
                   "Prefix cache queries, in terms of number of queried tokens.",
                   [(plain, cache.queries)])
            metric("vllm:prefix_cache_hits_total", "counter",
                   "Prefix cache hits, in terms of number of cached tokens.",
                   [(plain, cache.hits)])
        metric("vllm:request_success_total", "counter", "Count of successfully processed requests.",
               [(f'{{{labels},finished_reason="{r}"}}', n)
                for r, n in sorted(engine.success.items())])
        for name, hist, help_text in (
            ("vllm:time_to_first_token_seconds", engine.ttft, "Histogram of time to first token."),
            ("vllm:inter_token_latency_seconds", engine.itl, "Histogram of inter-token latency."),
            ("vllm:e2e_request_latency_seconds", engine.e2e, "Histogram of e2e request latency."),
            ("vllm:request_queue_time_seconds", engine.queue,
             "Histogram of time spent in WAITING phase for request."),
        ):
            samples = [(f'_bucket{{{labels},le="{b}"}}', c)
                       for b, c in zip(hist.BUCKETS, hist.counts, strict=True)]
            samples += [(f'_bucket{{{labels},le="+Inf"}}', hist.count),
                        (f"_count{{{labels}}}", hist.count), (f"_sum{{{labels}}}", hist.total)]
            metric(name, "histogram", help_text, samples)
        return "\n".join(lines) + "\n"


async def serve(host: str, port: int, app: App, stop: asyncio.Event,
                on_listening: object = None) -> None:
    """Listen until `stop` is set; `on_listening(port)` is called once bound."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Connection(app), host, port, backlog=1024,
                                      reuse_address=True)
    bound = server.sockets[0].getsockname()[1]
    if callable(on_listening):
        on_listening(bound)
    await stop.wait()
    server.close()
    # Python >= 3.12 waits in wait_closed() for every client connection: close idle
    # keep-alive ones ourselves, or `docker stop` would end in a SIGKILL.
    for conn in list(app.connections):
        conn.close()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(server.wait_closed(), 5)
