"""The recorders, one per backend: ``cuda`` (CUDA and XPU: PyTorch's
allocator history), ``cpu_allocator`` (c10's CPU allocator hooked),
``dispatch`` (new storages at the dispatcher, any device), ``profiler``
(the profiler turned into a snapshot); ``blocks`` holds what they write
alike."""
