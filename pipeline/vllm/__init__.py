"""The vLLM backend: a vLLM OpenAI server behind the engine API (docs/vllm.md).

`backend.py` drives it one reasoning step per streamed completion; `server.py` starts, checks
and stops the server process. What it shares with the native engine is pipeline/engine/base.py.
"""
