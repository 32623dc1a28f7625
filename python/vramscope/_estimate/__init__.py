"""Estimating memory before the run: the model traced on the meta device
(``trace``) with the optimizer it steps (``optimizer``), autocast as the
program enters it (``autocast``), what each device's build runs
(``cuda`` with ``cuda_kernels``, ``cpu``; ``kernel_scratch`` their
bookkeeping), a compiled model's plan (``compiled``), and whether it fits
(``fit``)."""
