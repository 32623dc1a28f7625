"""Recording inside training frameworks, one module per framework:

* ``vramscope.integrations.lightning.VramscopeCallback``: a PyTorch
  Lightning ``Callback``;
* ``vramscope.integrations.transformers.VramscopeCallback``: a Hugging Face
  ``TrainerCallback``;
* ``vramscope.integrations.accelerate.record``: a context manager around an
  Accelerate training loop.

Each records every rank's memory to its own file, marks an iteration per
training step, can dump every N steps, gives the memory figures to the
framework's loggers and, when training ends, checks the file against limits
(peak, reserved, leaks, growth) and fails the run with the finding's
explanation when one is exceeded.

Importing this package imports no framework; each module imports its own
when it is imported.
"""

# No __all__ naming the modules: `import *` would import every framework.
__all__: list = []
