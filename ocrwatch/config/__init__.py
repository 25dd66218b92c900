"""Configuration: one typed object, read from TOML, overridden by environment and flags.

:mod:`~ocrwatch.config.schema` is its shape, :mod:`~ocrwatch.config.load` reads it and
:mod:`~ocrwatch.config.check` validates it.

Precedence, lowest first: built-in defaults, the TOML file, ``OCRWATCH_*`` environment
variables, command-line flags. Everything is validated before the daemon starts; a bad
value stops start-up with a message naming the key, where it came from and what is allowed.
"""

from ocrwatch.config.check import validate
from ocrwatch.config.load import load
from ocrwatch.config.schema import Config, RemoteConfig, VllmConfig

# The allowed values (engine_names(), RANGES...) are imported from the schema module itself.
__all__ = ["Config", "RemoteConfig", "VllmConfig", "load", "validate"]
