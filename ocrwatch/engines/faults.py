"""Fault colours for the stand-ins the tests drive (no imports: the worker loads it)."""

from __future__ import annotations


class Fault:
    """One table of fault colours for every stand-in: the colour of a page's top-left
    pixel tells the fake vLLM backend (engines/vllm/worker.py) and the fake OpenAI-style
    server of the tests how to misbehave. One colour means one fault everywhere."""

    LOOPS_WHEN_COLD = (0, 255, 1)  # loops at the usual temperature, not warmer
    LOOPS_ALWAYS = (0, 255, 2)
    # The vLLM worker:
    CRASH_IN_BATCH = (255, 0, 1)  # kills the process while another page is in flight
    CRASH_AT_FULL_SIZE = (255, 0, 2)  # kills it while the page is 100 px wide or more
    CRASH_ALWAYS = (255, 0, 3)
    OOM_IN_BATCH = (255, 0, 4)  # out of memory while another page is in flight
    REFUSED = (255, 0, 5)  # refused as input (too long a prompt)
    # A remote server:
    FAILS_ONCE = (255, 1, 1)  # HTTP 503 once per server, then fine
    FAILS_ALWAYS = (255, 1, 2)  # HTTP 500 every time
    BAD_REQUEST = (255, 1, 3)  # HTTP 400
