"""The embedded vLLM engine: LightOnOCR-2-1B on the local GPU, in a worker process.

- :mod:`.memory`: the memory plan (vLLM settings for a budget; doctor uses it too);
- :mod:`.supervisor`: starting, talking to and ending the worker process;
- :mod:`.worker`: the worker process itself, which keeps vLLM's engine fed;
- :mod:`.messages`: what the daemon and the worker say to each other over the pipe;
- :mod:`.admission`: which pages go in next, and what happens to a page whose try failed;
- :mod:`.feeder`: the pages, the worker and their state, and the one thread that talks to
  the worker: admitting, collecting, idle;
- :mod:`.engine`: the engine the daemon sees; it holds a feeder.
"""

from ocrwatch.engines.vllm.engine import VllmEngine
from ocrwatch.engines.vllm.memory import MemoryPlan, plan_memory

__all__ = ["MemoryPlan", "VllmEngine", "plan_memory"]
